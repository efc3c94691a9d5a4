"""DHCP boot interfaces: ``pxe`` (legacy PXE, dnsmasq) and ``dhcp-httpboot`` (UEFI HTTP boot).

Built as a third party would build a metalboot plugin: it imports
``metalboot_framework`` (the contract, the DHCP backends, the BMC layer), the
core never imports it, and it meets the core only through entry points.
"""
