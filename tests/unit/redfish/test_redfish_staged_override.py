"""An override staged in the system's settings object is the next boot's.

iDRAC10 takes Boot changes only through ``Systems/<id>/Settings``, applied at
the next reset (Dell iDRAC10 Redfish API Guide; openstack/sushy system.py
``_get_settings_or_self``); a reset that fails leaves them staged there, out
of sight of a read of the system's Boot.
"""

import pytest

from plugin_steps import HTTP, VMEDIA, activated, plugin
from metalboot_framework.exceptions import BmcError

SETTINGS = "/redfish/v1/Systems/System.Embedded.1/Settings"


def failed_migration_to_virtual_media(services, vendor_bmc):
    """A machine at rest on redfish-http-url (booted), whose migration to
    virtual media staged {Cd, Once} and then failed at the reset."""
    bmc, task, http = activated(services, vendor_bmc, "dell-idrac10", HTTP)
    assert bmc.boots[-1]["url"] == task.artifact_url("ipxe.iso")
    assert "Boot" not in bmc.docs[SETTINGS]  # applied at the reset
    bmc.refuse[("POST", "ComputerSystem.Reset")] = (
        400, "IDRAC.2.8.RAC0508", "Unable to perform the operation.")
    vmedia = plugin(task.services, VMEDIA)
    with pytest.raises(BmcError):
        vmedia.activate(task)
    assert bmc.docs[SETTINGS]["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert bmc.boot["BootSourceOverrideEnabled"] == "Disabled"  # the system shows none
    del bmc.refuse[("POST", "ComputerSystem.Reset")]
    return bmc, task, http, vmedia


def test_a_staged_override_is_drift(services, vendor_bmc):
    bmc, task, http, _vmedia = failed_migration_to_virtual_media(services, vendor_bmc)
    drift = http.check_drift(task)
    assert any("Cd" in d and SETTINGS in d and "next reset" in d for d in drift), drift


def test_clean_up_clears_the_staged_override(services, vendor_bmc):
    bmc, task, http, vmedia = failed_migration_to_virtual_media(services, vendor_bmc)
    vmedia.clean_up(task)  # the rollback of the failed migration
    assert bmc.docs[SETTINGS]["Boot"]["BootSourceOverrideEnabled"] == "Disabled"
    assert http.check_drift(task) == []
    bmc.reset("ForceRestart")
    assert bmc.boots[-1]["target"] is None  # nothing of the failed migration boots
