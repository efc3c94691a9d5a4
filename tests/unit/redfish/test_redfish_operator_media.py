"""An operator's image in a virtual CD/DVD device is theirs.

Where a free device takes our ISO, an operator's image is not touched; where
none does (HPE iLO 5 has one CD/DVD device, VirtualMedia/2: HPE
ilo-rest-api-docs), it is ejected for the boot and inserted again by clean-up
(which is also what a rollback runs), as the operator's boot override is.
"""

from plugin_steps import VMEDIA, activated, machine_on

OPERATOR_ISO = "http://192.168.1.2/operator.iso"
DELL_MEDIA = "/redfish/v1/Systems/System.Embedded.1/VirtualMedia/"
HPE_MEDIA = "/redfish/v1/Managers/1/VirtualMedia/2"


def requests_to(bmc, path):
    return [(m, p) for m, p, _ in bmc.log if m != "GET" and p.startswith(path)]


def test_a_free_device_is_used_and_the_operators_left_alone(services, vendor_bmc):
    """iDRAC9 lists two CD/DVD devices; device 1 holds an operator's ISO and,
    like CD1 of DMTF's public-rackmount1 mockup, offers no EjectMedia action."""
    def operator_mounted(bmc):
        bmc.device("1").update(Image=OPERATOR_ISO, Inserted=True, Actions={
            "#VirtualMedia.InsertMedia": {
                "target": DELL_MEDIA + "1/Actions/VirtualMedia.InsertMedia"}})

    bmc, task, iface = activated(services, vendor_bmc, "dell-idrac9", VMEDIA,
                                 before=operator_mounted)
    assert bmc.device("1")["Image"] == OPERATOR_ISO and bmc.device("1")["Inserted"]
    ours = bmc.device("2")["Image"]
    assert ours and ours.endswith(".iso") and bmc.device("2")["Inserted"]
    assert requests_to(bmc, DELL_MEDIA + "1") == []
    assert bmc.resets == ["ForceRestart"]
    assert iface.check_drift(task) == []
    iface.clean_up(task)
    assert bmc.device("1")["Image"] == OPERATOR_ISO and not bmc.device("2")["Inserted"]
    assert requests_to(bmc, DELL_MEDIA + "1") == []


def hpe_with_operator_iso(vendor_bmc):
    """The iLO 5 stand-in with the DMTF media actions on its one CD/DVD
    device (the captured v1.15 payload offers only HPE's OEM ones) holding an
    operator's ISO."""
    bmc = vendor_bmc("hpe-ilo5", uefi=True)
    device = bmc.device("2")
    device["Actions"] = {f"#VirtualMedia.{name}": {
        "target": f"{HPE_MEDIA}/Actions/VirtualMedia.{name}"}
        for name in ("InsertMedia", "EjectMedia")}
    device.update(Image=OPERATOR_ISO, Inserted=True)
    return bmc


def test_the_only_device_is_given_back_by_clean_up(services, vendor_bmc):
    bmc = hpe_with_operator_iso(vendor_bmc)
    task, iface = machine_on(services, bmc, VMEDIA)
    iface.activate(task)
    ours = bmc.device("2")["Image"]
    assert ours != OPERATOR_ISO and bmc.boots[-1]["media"] == ours
    iface.clean_up(task)
    assert bmc.device("2")["Image"] == OPERATOR_ISO and bmc.device("2")["Inserted"]
    inserts = bmc.requests("POST", HPE_MEDIA + "/Actions/VirtualMedia.InsertMedia")
    assert inserts == [{"Image": ours}, {"Image": OPERATOR_ISO}]
    # a second clean-up (idempotent) inserts nothing more
    iface.clean_up(task)
    assert len(bmc.requests("POST", HPE_MEDIA + "/Actions/VirtualMedia.InsertMedia")) == 2


def test_activate_twice_then_clean_up_gives_back_the_operators(services, vendor_bmc):
    """A re-run activate (after a crash) finds ours in the device: the image
    to give back is still the operator's, not ours."""
    bmc = hpe_with_operator_iso(vendor_bmc)
    task, iface = machine_on(services, bmc, VMEDIA)
    iface.activate(task)
    iface.activate(task)
    iface.clean_up(task)
    assert bmc.device("2")["Image"] == OPERATOR_ISO and bmc.device("2")["Inserted"]
