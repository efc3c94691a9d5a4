"""Redfish boot interfaces: ``redfish-http-url`` and ``redfish-virtual-media-ipxe``.

Built as a third party would build a metalboot plugin: it imports
``metalboot_framework`` (the contract, the BMC layer), the core never imports it,
and the two interfaces meet the core only through entry points in setup.cfg.
"""
