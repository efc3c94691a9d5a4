"""A rollback leaves a vendor's BMC as it found it.

For every vendor stand-in and interface that migrates, the BIOS attributes
(current, with the pending ones over them), the system's Boot properties
(with those staged in its settings object over them) and the CD/DVD devices'
media are the same before activation and after the clean-up that a rollback
runs -- including those activate changed only through a vendor rule, such as
Dell's HttpDev1Protocol.
"""

import pytest

from plugin_steps import HTTP, VMEDIA, activated

MIGRATES = [("dell-idrac9", HTTP), ("dell-idrac9", VMEDIA), ("dell-idrac10", HTTP),
            ("dell-idrac10", VMEDIA), ("hpe-ilo5", HTTP), ("supermicro-x11", VMEDIA),
            ("supermicro-x12", VMEDIA), ("lenovo-xcc", VMEDIA)]


@pytest.mark.parametrize("vendor,interface", MIGRATES)
def test_clean_up_after_activation_changes_nothing(services, vendor_bmc, vendor, interface):
    before = []
    bmc, task, iface = activated(services, vendor_bmc, vendor, interface,
                                 before=lambda bmc: before.append(bmc.next_boot()))
    assert bmc.boots[-1]["url"] or bmc.boots[-1]["media"]  # it did boot ours
    assert bmc.next_boot() != before[0]
    iface.clean_up(task)
    assert bmc.next_boot() == before[0]
    # and the BIOS really gets them back at the next reset (Dell: a config job
    # or SettingsApplyTime OnReset)
    bmc.reset("ForceRestart")
    assert bmc.bios_attributes == before[0]["bios"]


def test_dell_http_device_attributes_all_restored(services, vendor_bmc):
    bmc, task, iface = activated(services, vendor_bmc, "dell-idrac9", HTTP)
    changed = {k: bmc.bios_attributes[k] for k in ("HttpDev1Uri", "HttpDev1EnDis",
                                                    "HttpDev1Protocol")}
    assert changed == {"HttpDev1Uri": task.artifact_url("ipxe.iso"),
                       "HttpDev1EnDis": "Enabled", "HttpDev1Protocol": "IPv6"}
    iface.clean_up(task)
    bmc.reset("ForceRestart")
    assert {k: bmc.bios_attributes[k] for k in changed} == {
        "HttpDev1Uri": "", "HttpDev1EnDis": "Disabled", "HttpDev1Protocol": "IPv4"}
