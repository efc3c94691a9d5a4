"""Every core option, for oslo-config-generator (entry point oslo.config.opts)."""

from metalboot_framework.conf import api, artifacts, bmc, conductor, database, default
from metalboot_framework.conf import agent, boot_server, dhcp


def list_opts():
    result = []
    for module in (default, api, database, conductor, artifacts, bmc, dhcp, boot_server, agent):
        result.extend(module.list_opts())
    return result
