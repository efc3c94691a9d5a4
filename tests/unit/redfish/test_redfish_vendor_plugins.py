"""Both Redfish interfaces against the mock BMC serving each vendor's real payloads.

Each test drives a plugin through its public methods (validate, prepare,
activate, check_drift, clean_up) with real Services (SQLite in tmp) and reads
the outcome from the mock: what the simulated firmware booted, how many
resets and requests it took, what was left on the BMC.
"""

import dataclasses

import pytest
import requests

from plugin_steps import HTTP, PASSWORD, VMEDIA, activated, plugin, task_for
from redfish_mock_bmc import is_bios_settings
from metalboot_framework.exceptions import BmcError, ValidationFailed


def test_dell_idrac9_http_url_boots_the_url_after_one_reset(services, vendor_bmc):
    """iDRAC keeps HttpDev1Uri pending until a config job or SettingsApplyTime
    applies it: the firmware fetches the URL only if activate arranged that."""
    bmc, task, iface = activated(services, vendor_bmc, "dell-idrac9", HTTP)
    url = task.artifact_url("ipxe.iso")
    assert bmc.boots[-1]["url"] == url and bmc.boots[-1]["target"] == "UefiHttp"
    assert bmc.resets == ["ForceRestart"]
    attributes = bmc.bios_attributes
    assert attributes["HttpDev1EnDis"] == "Enabled"
    assert attributes["HttpDev1Protocol"] == "IPv6"  # the boot URL is IPv6
    assert all(tag for _path, tag in bmc.if_matches)  # every PATCH with If-Match
    assert iface.check_drift(task) == []
    iface.clean_up(task)
    bmc.reset("ForceRestart")  # the clean-up applies at the next boot, as staged
    assert bmc.bios_attributes["HttpDev1Uri"] == "" and \
        bmc.bios_attributes["HttpDev1EnDis"] == "Disabled"


def test_dell_drift_reads_the_current_attributes(services, vendor_bmc):
    bmc = vendor_bmc("dell-idrac9", uefi=True)
    svc = services()
    task = task_for(svc, bmc, HTTP)
    iface = plugin(svc, HTTP)
    settings = "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"
    # pending only (staged, never applied): the firmware does not use it
    bmc.docs[settings]["Attributes"] = {"HttpDev1Uri": task.artifact_url("ipxe.iso"),
                                        "HttpDev1EnDis": "Enabled"}
    assert any("HttpBootUri" in d for d in iface.check_drift(task))


def test_lenovo_media_keeps_the_operators_floppy(services, vendor_bmc):
    """XCC: If-Match from the body's @odata.etag, media changed by PATCH, and
    the operator's floppy boot.img is not ours to eject."""
    bmc, task, iface = activated(services, vendor_bmc, "lenovo-xcc", VMEDIA)
    assert bmc.device("Floppy")["Image"] == "http://192.168.1.2/boot.img"
    iso = bmc.device("CD")["Image"]
    assert iso and iso.endswith(".iso") and bmc.device("CD")["Inserted"]
    assert bmc.boots[-1]["media"] == iso and bmc.resets == ["ForceRestart"]
    assert all(tag for _path, tag in bmc.if_matches)
    iface.clean_up(task)
    assert not bmc.device("CD")["Inserted"]
    assert bmc.device("Floppy")["Image"] == "http://192.168.1.2/boot.img"


def test_idrac10_slot_2_refused_slot_1_used(services, vendor_bmc):
    bmc, _task, _iface = activated(services, vendor_bmc, "dell-idrac10", VMEDIA)
    assert bmc.device("1")["Inserted"] and not bmc.device("2")["Inserted"]
    # validate read the manager (iDRAC10): slot 1 is tried first, slot 2 never
    inserts = [p for m, p, _ in bmc.log if m == "POST" and "InsertMedia" in p]
    assert inserts == ["/redfish/v1/Systems/System.Embedded.1/VirtualMedia/1/Actions/"
                       "VirtualMedia.InsertMedia"]


#: (vendor, interface) -> requests of validate, prepare and activate of a
#: machine whose system is named: no more than the bare sushy script of
#: benchmarks/redfish_vendors.py makes for the same migration (in the comment)
REQUESTS = {("dell-idrac9", HTTP): 9,            # bare script 9
            ("dell-idrac9", VMEDIA): 12,         # 13
            ("dell-idrac10", HTTP): 10,          # 10
            ("dell-idrac10", VMEDIA): 13,        # 14
            ("hpe-ilo5", HTTP): 9,               # 10
            ("supermicro-x11", VMEDIA): 11,      # 13
            ("supermicro-x12", VMEDIA): 10,      # 11
            ("lenovo-xcc", VMEDIA): 11}          # 12


@pytest.mark.parametrize("vendor,interface", sorted(REQUESTS))
def test_requests_per_migration_step(services, vendor_bmc, vendor, interface):
    """prepare needs no request (activate records the operator's override from
    the read its own PATCH uses); the service root is never read when the
    system is named; no step reads a resource twice save the power poll and
    the read-back of an ejected device (Lenovo XCC: an operator's override to
    restore in clean_up, after the clearing read the system)."""
    bmc = vendor_bmc(vendor, uefi=True)
    svc = services()
    task = task_for(svc, bmc, interface,
                    properties={"redfish_system_id": bmc.docs[bmc.system_path]["Id"]})
    iface = plugin(svc, interface)
    steps = {}
    for step in (iface.validate, iface.prepare, iface.activate, iface.clean_up):
        start = len(bmc.log)
        step(task)
        steps[step.__name__] = [(m, p) for m, p, _ in bmc.log[start:]]
    assert steps["prepare"] == []
    assert bmc.boots[-1]["url"] or bmc.boots[-1]["media"]
    assert bmc.resets == ["ForceRestart"]
    assert ("GET", "/redfish/v1/") not in [r for made in steps.values() for r in made]
    for name, made in steps.items():
        reads = [p for m, p in made if m == "GET"]
        twice = {p for p in reads if reads.count(p) > 1}
        # activate: the system before the PATCH, and after the reset (power)
        allowed = {bmc.system_path} if name == "activate" else \
            {p for m, p in made if m == "PATCH" and "VirtualMedia" in p} | \
            {p.split("/Actions/")[0] for m, p in made if "EjectMedia" in p}
        assert twice <= allowed, (name, made)
    made = steps["validate"] + steps["activate"]
    assert len(made) == REQUESTS[vendor, interface], steps


def test_public_rackmount1_refused_with_the_reason(services, vendor_bmc):
    bmc = vendor_bmc("dmtf-public-rackmount1")
    svc = services()
    with pytest.raises(ValidationFailed) as exc:
        plugin(svc, VMEDIA).validate(task_for(svc, bmc, VMEDIA))
    assert "InsertMedia" in str(exc.value) and "CD1" in str(exc.value)
    assert "VirtualMedia" in exc.value.fields
    with pytest.raises(ValidationFailed) as exc:
        plugin(svc, HTTP).validate(task_for(svc, bmc, HTTP, "m2"))
    assert "UefiHttp is not allowed" in str(exc.value)
    assert bmc.counts["PATCH"] == bmc.counts["POST"] == 0  # nothing half-applied


def test_supermicro_legacy_refused_and_mode_sent_again(services, vendor_bmc):
    bmc = vendor_bmc("supermicro-x12")  # as captured: BootSourceOverrideMode Legacy
    svc = services()
    with pytest.raises(ValidationFailed) as exc:
        plugin(svc, VMEDIA).validate(task_for(svc, bmc, VMEDIA))
    assert "boots Legacy" in str(exc.value) and "Supermicro" in str(exc.value)
    assert bmc.counts["PATCH"] == 0
    bmc = vendor_bmc("supermicro-x12", uefi=True)
    task = task_for(svc, bmc, VMEDIA, "m2")
    iface = plugin(svc, VMEDIA)
    iface.validate(task)
    iface.activate(task)
    boot = bmc.requests("PATCH")[-1]["Boot"]
    assert boot["BootSourceOverrideTarget"] == "UsbCd"
    assert boot["BootSourceOverrideMode"] == "UEFI"  # re-sent with the target


def test_supermicro_x11_insert_sends_the_image_alone(services, vendor_bmc):
    """X11 BMC firmware refuses InsertMedia naming Inserted or WriteProtected
    (400 PropertyUnknown), and its eject leaves ImageName behind: the insert
    sends only the Image, the virtual CD boots as UsbCd after one reset, and
    the stale ImageName neither counts as media held nor stops the next
    insert."""
    bmc, task, iface = activated(services, vendor_bmc, "supermicro-x11", VMEDIA)
    cd = "/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia."
    iso = bmc.device("CD1")["Image"]
    assert iso and iso.endswith(".iso") and bmc.device("CD1")["Inserted"]
    assert bmc.requests("POST", cd + "InsertMedia") == [{"Image": iso}]
    assert bmc.boots == [{"target": "UsbCd", "url": None, "media": iso, "mode": "UEFI"}]
    assert bmc.resets == ["ForceRestart"]
    assert iface.check_drift(task) == []
    iface.clean_up(task)
    assert bmc.requests("POST", cd + "EjectMedia") == [{}]  # the Reference Guide's body
    device = bmc.device("CD1")
    assert not device["Inserted"] and device["Image"] is None
    assert device["ImageName"] == iso.rpartition("/")[2]  # the BMC keeps it
    assert device["ConnectedVia"] == "NotConnected"
    # the next migration inserts again over the stale ImageName, ejecting nothing
    posts = len(bmc.requests("POST", cd + "EjectMedia"))
    iface.activate(task)
    assert bmc.device("CD1")["Inserted"] and bmc.boots[-1]["media"] == iso
    assert len(bmc.requests("POST", cd + "EjectMedia")) == posts
    # the mock refuses what a client sending Inserted would get
    answer = requests.post(bmc.url + cd + "InsertMedia", timeout=5,
                           json={"Image": iso, "Inserted": True, "WriteProtected": True})
    assert answer.status_code == 400 and "Inserted" in answer.text


def test_an_image_left_with_inserted_false_is_no_media(services, vendor_bmc):
    """Where a BMC leaves Image set after an eject with Inserted false
    (reported of Supermicro), Inserted decides: the stale image is not ejected
    again, the eject of ours is done, and the next insert goes ahead."""
    def stale_image(bmc):
        bmc.device("CD1").update(Image="http://other/old.iso", Inserted=False)
        bmc.eject_keeps_image = True

    bmc, task, iface = activated(services, vendor_bmc, "supermicro-x11", VMEDIA,
                                 before=stale_image)
    cd = "/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia."
    iso = bmc.device("CD1")["Image"]
    assert iso != "http://other/old.iso" and bmc.device("CD1")["Inserted"]
    assert bmc.requests("POST", cd + "EjectMedia") == []
    assert bmc.boots == [{"target": "UsbCd", "url": None, "media": iso, "mode": "UEFI"}]
    assert iface.check_drift(task) == []
    iface.clean_up(task)  # the eject leaves our Image behind, Inserted false: done
    assert bmc.requests("POST", cd + "EjectMedia") == [{}]
    assert bmc.device("CD1")["Image"] == iso and bmc.device("CD1")["Inserted"] is False
    assert "virtual media does not hold" in " ".join(iface.check_drift(task))


@pytest.mark.parametrize("inserted, image, has_media", [
    (True, "http://a/x.iso", True), (False, "http://a/x.iso", False),
    (None, "http://a/x.iso", True), (None, None, False), (True, None, True)])
def test_inserted_decides_where_the_device_gives_it(inserted, image, has_media):
    from metalboot_framework.bmc.media import MediaDevice
    device = MediaDevice(path="/vm/1", id="1", media_types=("CD",), image=image,
                         inserted=inserted)
    assert device.has_media is has_media
    assert device.holds("http://a/x.iso") is (image is not None and inserted is not False)


def test_failed_eject_is_not_reported_as_done(services, vendor_bmc):
    bmc = vendor_bmc("supermicro-x12", uefi=True)
    bmc.device("CD1").update(Image="http://other/old.iso", Inserted=True)
    bmc.eject_ignored = True
    svc = services()
    task = task_for(svc, bmc, VMEDIA)
    with pytest.raises(BmcError) as exc:
        plugin(svc, VMEDIA).activate(task)
    assert "still holds http://other/old.iso" in str(exc.value)
    assert bmc.resets == []
    bmc.eject_ignored, bmc.eject_conflict = False, True
    with pytest.raises(BmcError) as exc:
        plugin(svc, VMEDIA).activate(task)
    assert "ResourceInUse" in str(exc.value) and "Supermicro" in str(exc.value)
    assert PASSWORD not in str(exc.value)


def test_insert_answered_late_is_sent_once(services, vendor_bmc):
    bmc = vendor_bmc("supermicro-x12", uefi=True)
    bmc.slow[("POST", "VirtualMedia.InsertMedia")] = 0.8
    svc = services(read_timeout=0.5)
    task = task_for(svc, bmc, VMEDIA)
    plugin(svc, VMEDIA).activate(task)
    inserts = [p for m, p, _ in bmc.log if p.endswith("InsertMedia")]
    assert len(inserts) == 1 and bmc.device("CD1")["Inserted"]
    assert bmc.resets == ["ForceRestart"]


@pytest.mark.parametrize("vendor,interface", [
    ("lenovo-xcc", VMEDIA), ("supermicro-x11", VMEDIA), ("dell-idrac9", HTTP)])
def test_the_operators_override_is_restored(services, vendor_bmc, vendor, interface):
    """XCC as captured has a pending "Once Hdd" of the operator's, the X11 as
    captured a "Continuous Hdd"; the iDRAC is given a "Continuous Hdd".
    Clean-up (a rollback) leaves them as found."""
    boot = None  # as captured
    if vendor == "lenovo-xcc":
        before = {"BootSourceOverrideEnabled": "Once", "BootSourceOverrideTarget": "Hdd"}
    else:
        before = {"BootSourceOverrideEnabled": "Continuous",
                  "BootSourceOverrideTarget": "Hdd"}
        boot = before if vendor == "dell-idrac9" else None
    bmc, task, iface = activated(services, vendor_bmc, vendor, interface, boot)
    assert bmc.boots[-1]["target"] in ("Cd", "UsbCd", "UefiHttp")  # ours took the boot
    iface.clean_up(task)
    assert {k: bmc.boot[k] for k in before} == before
    assert bmc.boot["BootSourceOverrideMode"] == "UEFI"


@pytest.mark.parametrize("firmware,model,refused", [
    ("5.10.50.00", "14G Monolithic", True), ("7.00.00.00", "15G Monolithic", False),
    ("1.20.50.52", "17G Monolithic", False)])
def test_idrac_firmware_outside_the_virtual_media_range_is_refused(
        services, vendor_bmc, firmware, model, refused):
    bmc = vendor_bmc("dell-idrac9", uefi=True)
    bmc.docs["/redfish/v1/Managers/iDRAC.Embedded.1"].update(FirmwareVersion=firmware,
                                                             Model=model)
    svc = services()
    validate = plugin(svc, VMEDIA).validate
    task = task_for(svc, bmc, VMEDIA)
    if not refused:
        validate(task)
        return
    with pytest.raises(ValidationFailed) as exc:
        validate(task)
    assert "Dell iDRAC firmware 5.10.50.00" in str(exc.value)
    assert "physical drive" in str(exc.value) and "Manager.FirmwareVersion" in exc.value.fields


def test_hpe_ilo5_url_in_urlbootfile_applied_at_the_reset(services, vendor_bmc):
    """iLO 5 (captured payloads): no Boot.HttpBootUri, the URL goes to the BIOS
    attribute UrlBootFile through the pending bios/settings, applied at the
    one reset; clean-up stages it empty again."""
    bmc, task, iface = activated(services, vendor_bmc, "hpe-ilo5", HTTP)
    url = task.artifact_url("ipxe.iso")
    assert bmc.boots == [{"target": "UefiHttp", "url": url, "media": None, "mode": "UEFI"}]
    assert bmc.resets == ["ForceRestart"]
    assert bmc.bios_attributes["UrlBootFile"] == url
    assert all(tag for _path, tag in bmc.if_matches)
    assert iface.check_drift(task) == []
    iface.clean_up(task)
    bmc.reset("ForceRestart")
    assert bmc.bios_attributes["UrlBootFile"] == ""
    svc = services()
    del bmc.bios_attributes["UrlBootFile"]
    with pytest.raises(ValidationFailed) as exc:
        iface.validate(task_for(svc, bmc, HTTP, "m3"))
    assert "UrlBootFile" in str(exc.value) and "HPE iLO" in str(exc.value)


def test_hpe_ilo5_virtual_media_refused_and_eject_sent_with_a_body(services, vendor_bmc):
    """The captured iLO 5 v1.15 CD offers only HPE's OEM insert/eject actions:
    validate refuses, naming the vendor and the missing InsertMedia. With the
    DMTF actions (added here by the test), a body-less POST answers 415 on iLO,
    so the eject of someone else's ISO is sent with a body."""
    bmc = vendor_bmc("hpe-ilo5", uefi=True)
    svc = services()
    with pytest.raises(ValidationFailed) as exc:
        plugin(svc, VMEDIA).validate(task_for(svc, bmc, VMEDIA))
    assert "HPE iLO" in str(exc.value) and "InsertMedia" in str(exc.value)
    assert bmc.counts["PATCH"] == bmc.counts["POST"] == 0
    device = bmc.device("2")
    base = "/redfish/v1/Managers/1/VirtualMedia/2/Actions/VirtualMedia."
    device["Actions"] = {"#VirtualMedia.InsertMedia": {"target": base + "InsertMedia"},
                         "#VirtualMedia.EjectMedia": {"target": base + "EjectMedia"}}
    device.update(Image="http://other/x.iso", Inserted=True)
    vm_task = task_for(svc, bmc, VMEDIA, "m2")
    plugin(svc, VMEDIA).activate(vm_task)
    assert device["Image"].endswith(".iso") and device["Image"] != "http://other/x.iso"
    assert bmc.boots[-1]["media"] == device["Image"] and bmc.resets == ["ForceRestart"]


def test_dell_without_apply_times_gets_a_config_job(services, vendor_bmc):
    """An iDRAC whose BIOS advertises no SupportedApplyTimes needs a config job
    (POST Managers/iDRAC.Embedded.1/Jobs with TargetSettingsURI)."""
    bmc = vendor_bmc("dell-idrac9", uefi=True)
    del bmc.docs["/redfish/v1/Systems/System.Embedded.1/Bios"]["@Redfish.Settings"][
        "SupportedApplyTimes"]
    svc = services()
    task = task_for(svc, bmc, HTTP)
    iface = plugin(svc, HTTP)
    iface.activate(task)
    assert [j["TargetSettingsURI"] for j in bmc.jobs] == [
        "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"]
    assert bmc.boots[-1]["url"] == task.artifact_url("ipxe.iso")
    assert bmc.resets == ["ForceRestart"]


def test_the_source_interfaces_override_is_not_taken_for_the_operators(services, vendor_bmc):
    """Migrating from redfish-virtual-media-ipxe, its Once Cd is still set when
    redfish-http-url prepares: clean-up must not put it back."""
    bmc, task, iface = activated(services, vendor_bmc, "dell-idrac9", HTTP,
                                 {"BootSourceOverrideEnabled": "Continuous",
                                  "BootSourceOverrideTarget": "Cd"})
    iface.clean_up(task)
    assert bmc.boot["BootSourceOverrideEnabled"] == "Disabled"


@pytest.mark.parametrize("vendor", ["dell-idrac9", "hpe-ilo5"])
def test_bios_is_read_only_for_the_url_boot(services, vendor_bmc, vendor):
    """The BIOS (and its settings object) is read where the URL lives there:
    redfish-http-url on Dell and HPE; virtual media never reads it."""
    def bios_reads(bmc):
        return [p for m, p, _ in bmc.log if m == "GET" and "/bios" in p.lower()]
    bmc, task, iface = activated(services, vendor_bmc, vendor, HTTP)
    assert bios_reads(bmc)
    if vendor == "hpe-ilo5":
        return  # the captured iLO 5 refuses virtual media (see above)
    bmc, task, iface = activated(services, vendor_bmc, vendor, VMEDIA)
    iface.check_drift(task)
    iface.clean_up(task)
    assert bios_reads(bmc) == [] and bmc.resets == ["ForceRestart"]


def test_validate_reads_the_manager_once(services, vendor_bmc):
    """iDRAC virtual media: validate needs the manager's firmware version and
    its VirtualMedia link; one read serves both."""
    bmc = vendor_bmc("dell-idrac9", uefi=True)
    svc = services()
    plugin(svc, VMEDIA).validate(task_for(svc, bmc, VMEDIA))
    manager = "/redfish/v1/Managers/iDRAC.Embedded.1"
    assert [p for m, p, _ in bmc.log if m == "GET" and p == manager] == [manager]


@pytest.mark.parametrize("vendor", ["dell-idrac9", "dell-idrac10", "hpe-ilo5"])
def test_if_match_from_the_body_etag_and_428_names_the_refused_patch(
        services, vendor_bmc, vendor):
    """A BMC requiring If-Match that gives its ETag only as the body's
    @odata.etag gets it on every PATCH; one that gives none answers 428, and
    the error names that PATCH (of the BIOS settings), not another request."""
    bmc = vendor_bmc(vendor, uefi=True)
    bmc.profile = dataclasses.replace(bmc.profile, if_match_required=True, etag_in="body")
    svc = services()
    task = task_for(svc, bmc, HTTP)
    iface = plugin(svc, HTTP)
    iface.validate(task)
    iface.activate(task)
    assert bmc.boots[-1]["url"] == task.artifact_url("ipxe.iso")
    patched = {path for path, _tag in bmc.if_matches}
    assert any(is_bios_settings(path) for path in patched), patched
    assert bmc.if_matches and all(tag for _path, tag in bmc.if_matches), bmc.if_matches
    assert not [f for f in bmc.faults if f[2] == 428]

    bmc = vendor_bmc(vendor, uefi=True)
    bmc.profile = dataclasses.replace(bmc.profile, if_match_required=True, etag_in="none")
    task = task_for(svc, bmc, HTTP, "m2")
    with pytest.raises(BmcError) as exc:
        iface.activate(task)
    [(method, refused, _status, message_id)] = [f for f in bmc.faults if f[2] == 428]
    assert method == "PATCH" and is_bios_settings(refused)
    text = str(exc.value)
    assert f"failed at PATCH {refused}" in text and message_id in text, text
    assert text.count("failed at ") == 1 and PASSWORD not in text
    assert bmc.resets == [] and bmc.boots == []
