"""The one configuration object, with every core option group registered.

Each module of this package owns one group and exposes ``list_opts()``;
``opts.list_opts`` gathers them for oslo-config-generator.
"""

from oslo_config import cfg

from metalboot_framework.conf import api, artifacts, bmc, conductor, database, default
from metalboot_framework.conf import agent, boot_server, dhcp

CONF = cfg.CONF

for _module in (default, api, database, conductor, artifacts, bmc, dhcp, boot_server, agent):
    _module.register_opts(CONF)
