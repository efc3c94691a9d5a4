"""A resource that changes between our read and our PATCH (412 Precondition Failed).

The mock answers a PATCH whose If-Match is no longer the resource's ETag with
412 (RFC 9110 13.1.1) and, on Lenovo XCC, one without If-Match with 428
(ansible/ansible#56050). Each test changes the resource once, as another
client would, right before our PATCH arrives.
"""

import pytest

from plugin_steps import HTTP, VMEDIA, activated, plugin, task_for
from redfish_mock_bmc import merge
from metalboot_framework.exceptions import BmcError, BmcUnsupported

DELL_SETTINGS = "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"


def stale(bmc, path):
    """The If-Match of each PATCH of ``path``, and the 412 answers to them."""
    tags = [tag for p, tag in bmc.if_matches if p == path]
    refused = [f for f in bmc.faults if f[1] == path and f[2] == 412]
    return tags, refused


def test_lenovo_boot_patch_read_again_and_sent_with_the_fresh_etag(services, vendor_bmc):
    """XCC requires If-Match: sending the PATCH again without it (428) would
    fail the activation."""
    def someone_writes(bmc):
        bmc.when("PATCH", bmc.system_path,
                 lambda b: b.docs[b.system_path].update(AssetTag="rack-7"))

    bmc, task, iface = activated(services, vendor_bmc, "lenovo-xcc", VMEDIA,
                                 before=someone_writes)
    tags, refused = stale(bmc, bmc.system_path)
    assert len(refused) == 1 and len(tags) == 2 and all(tags) and tags[0] != tags[1]
    assert not [f for f in bmc.faults if f[2] == 428]
    assert all(tag for _path, tag in bmc.if_matches)
    assert bmc.docs[bmc.system_path]["AssetTag"] == "rack-7"
    assert bmc.boots[-1]["media"] == bmc.device("CD")["Image"]
    assert bmc.resets == ["ForceRestart"]


def test_dell_bios_settings_changed_meanwhile_are_kept(services, vendor_bmc):
    """Another client stages a BIOS attribute between our read of Bios/Settings
    and our PATCH: ours goes again with the fresh ETag, never without one."""
    def someone_stages(bmc):
        bmc.when("PATCH", DELL_SETTINGS, lambda b: merge(
            b.docs[DELL_SETTINGS], {"Attributes": {"SysProfile": "PerfOptimized"}}))

    bmc, task, iface = activated(services, vendor_bmc, "dell-idrac9", HTTP,
                                 before=someone_stages)
    tags, refused = stale(bmc, DELL_SETTINGS)
    assert len(refused) == 1 and len(tags) == 2 and all(tags) and tags[0] != tags[1]
    assert all(tag for _path, tag in bmc.if_matches), bmc.if_matches
    assert bmc.bios_attributes["SysProfile"] == "PerfOptimized"  # applied at the reset
    assert bmc.boots[-1]["url"] == task.artifact_url("ipxe.iso")


def test_a_change_that_no_longer_applies_is_not_sent(services, vendor_bmc):
    """The system stops allowing UefiHttp between read and PATCH: the read
    after the 412 shows it, and the override is refused instead of forced."""
    bmc = vendor_bmc("dell-idrac9", uefi=True)

    def withdraw(b):
        b.boot["BootSourceOverrideTarget@Redfish.AllowableValues"] = ["None", "Pxe", "Hdd"]
    bmc.when("PATCH", bmc.system_path, withdraw)
    svc = services()
    with pytest.raises(BmcUnsupported) as exc:
        plugin(svc, HTTP).activate(task_for(svc, bmc, HTTP))
    assert "UefiHttp is not allowed" in str(exc.value)
    tags, refused = stale(bmc, bmc.system_path)
    assert len(tags) == 1 and tags[0] and len(refused) == 1
    assert bmc.boot["BootSourceOverrideTarget"] != "UefiHttp" and bmc.resets == []


def test_lenovo_insert_meets_someone_elses_image(services, vendor_bmc):
    """XCC changes media by PATCH of the device: another client inserts its
    image between our read and our PATCH; the 412 and the read after it show
    the device taken, and ours does not replace it."""
    cd = "/redfish/v1/Managers/1/VirtualMedia/CD"

    def operator_inserts(bmc):
        bmc.when("PATCH", cd, lambda b: b.device("CD").update(
            Image="http://192.168.1.2/operator.iso", Inserted=True))

    seen = []
    with pytest.raises(BmcError) as exc:
        activated(services, vendor_bmc, "lenovo-xcc", VMEDIA,
                  before=lambda bmc: (seen.append(bmc), operator_inserts(bmc)))
    assert "operator.iso" in str(exc.value) and "not replaced" in str(exc.value)
    bmc = seen[0]
    assert bmc.device("CD")["Image"] == "http://192.168.1.2/operator.iso"
    assert all(tag for _path, tag in bmc.if_matches) and bmc.resets == []


def test_an_override_set_meanwhile_is_the_one_clean_up_restores(services, vendor_bmc):
    """The operator sets ``Continuous Pxe`` between activate's read and its
    PATCH: the read after the 412 shows it, it is recorded before ours
    overwrites it, and clean-up puts it back (not what the first read saw)."""
    def operator_sets_pxe(bmc):
        bmc.when("PATCH", bmc.system_path, lambda b: b.boot.update(
            BootSourceOverrideTarget="Pxe", BootSourceOverrideEnabled="Continuous"))

    bmc, task, iface = activated(services, vendor_bmc, "dell-idrac9", HTTP,
                                 before=operator_sets_pxe)
    assert bmc.boots[-1]["url"] == task.artifact_url("ipxe.iso")  # ours took the boot
    iface.clean_up(task)
    assert (bmc.boot["BootSourceOverrideTarget"], bmc.boot["BootSourceOverrideEnabled"]) \
        == ("Pxe", "Continuous")
