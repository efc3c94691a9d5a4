"""The one place these plugins talk to a BMC (through ``metalboot_framework.bmc``)."""

from metalboot_framework.bmc import client as bmc_client
from metalboot_framework.bmc import power


def redfish_mode(task):
    return "Legacy" if (task.machine.boot_mode or "").lower() in ("bios", "legacy") else "UEFI"


def boot_once_and_reset(task, target):
    """Set the next boot to ``target`` (Pxe, UefiHttp; no HTTP boot URI) and reset.

    Returns a sentence for the machine's history.
    """
    client = bmc_client.client_for_task(task)
    mode = redfish_mode(task)
    if target == "UefiHttp":
        # The firmware takes the URL from DHCP only when the BMC holds no
        # HttpBootUri; a stale one (e.g. redfish-http-url's, cleaned up only
        # after this migration) would be booted instead.
        client.clear_boot_override(only_targets=(), clear_http_boot_uri=True)
    enabled = client.set_boot_override(target, enabled="Once", mode=mode)
    state = power.reset(client, wait=True)
    return (f"BMC {client.address}: boot override {target} ({enabled or 'Once'}, {mode}) "
            f"set, system {client.system_label} reset" + (f", now {state}" if state else ""))


def clear_override(task, target):
    """Disable the boot override if it still points at ``target`` (ours)."""
    client = bmc_client.client_for_task(task)
    return client.clear_boot_override(only_targets=[target], clear_http_boot_uri=False)
