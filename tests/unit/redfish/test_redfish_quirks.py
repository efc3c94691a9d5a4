"""Vendor quirks, against a mock BMC serving each vendor's kind of Redfish JSON."""

import pytest

from redfish_mock_bmc import SYSTEM, make_conf
from metalboot_framework.bmc import power, quirks
from metalboot_framework.bmc.client import BmcClient
from metalboot_framework.exceptions import BmcError, BmcUnsupported
from metalboot_framework.task import BmcInfo

URI = "http://[fd00:b007::1]:6480/boot/m1/redfish-http-url/tok/ipxe.iso"


def client(tmp_path, bmc, **overrides):
    return BmcClient(make_conf(tmp_path, **overrides), BmcInfo(bmc.url, "root", "calvin-pw", False))


@pytest.mark.parametrize("manufacturer,model,name", [
    ("AMI", "MegaRAC SP-X", "ami"), ("American Megatrends International", "", "ami"),
    ("ASRockRack", "ROMED8-2T", "asrock"), ("Supermicro", "X12DPi", "supermicro"),
    ("Supermicro", "SYS-2029BT-HNTR", "supermicro"),
    ("HPE", "ProLiant DL360 Gen10", "hpe"), ("Dell Inc.", "PowerEdge R650", "dell"),
    ("Lenovo", "ThinkSystem SR650", "lenovo"), ("Sushy Emulator", "", "generic"),
    (None, None, "generic")])
def test_quirk_table(manufacturer, model, name):
    assert quirks.quirks_for(manufacturer, model).name == name


def test_generic_bmc_gets_minimal_request(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    bmc.boot["BootSourceOverrideEnabled"] = "Once"
    client(tmp_path, bmc).set_boot_override("UefiHttp", "Once", "UEFI", URI)
    # Enabled and Mode already as wanted: not sent
    assert bmc.requests("PATCH") == [{"Boot": {"BootSourceOverrideTarget": "UefiHttp",
                                               "HttpBootUri": URI}}]


def test_ami_gets_full_request(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("AMI", "MegaRAC")
    bmc.boot["BootSourceOverrideEnabled"] = "Once"
    client(tmp_path, bmc).set_boot_override("UefiHttp", "Once", "UEFI", URI)
    assert bmc.requests("PATCH") == [{"Boot": {
        "BootSourceOverrideTarget": "UefiHttp", "BootSourceOverrideEnabled": "Once",
        "BootSourceOverrideMode": "UEFI", "HttpBootUri": URI}}]
    c = client(tmp_path, bmc)
    c.clear_boot_override()
    assert bmc.requests("PATCH")[-1] == {"Boot": {
        "BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "UefiHttp",
        "BootSourceOverrideMode": "UEFI", "HttpBootUri": None}}


def test_asrock_quirk_found_through_manager(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("ASRockRack", system_manufacturer=False)
    c = client(tmp_path, bmc)
    assert c.quirks().name == "asrock"
    c.set_boot_override("Pxe", "Once", "UEFI")
    assert set(bmc.requests("PATCH")[0]["Boot"]) == {
        "BootSourceOverrideTarget", "BootSourceOverrideEnabled", "BootSourceOverrideMode"}


def test_supermicro_always_gets_enabled(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Supermicro", "X12")
    bmc.boot["BootSourceOverrideEnabled"] = "Once"
    client(tmp_path, bmc).set_boot_override("Cd", "Once", "UEFI")
    # Enabled and Mode sent although unchanged (Supermicro drops them otherwise)
    assert bmc.requests("PATCH") == [{"Boot": {"BootSourceOverrideTarget": "Cd",
                                               "BootSourceOverrideEnabled": "Once",
                                               "BootSourceOverrideMode": "UEFI"}}]


def test_hpe_retried_while_in_post(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("HPE", "ProLiant DL380 Gen10")
    bmc.post_refusals = 2
    client(tmp_path, bmc).set_boot_override("UefiHttp", "Once", "UEFI", URI)
    assert len(bmc.requests("PATCH")) == 3
    assert bmc.boot["HttpBootUri"] == URI and bmc.boot["BootSourceOverrideTarget"] == "UefiHttp"


def test_hpe_post_retry_gives_up_after_timeout(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("HPE", "ProLiant")
    bmc.post_refusals = 10 ** 6
    with pytest.raises(BmcError) as exc:
        client(tmp_path, bmc, post_retry_timeout=0.2).set_boot_override("Pxe")
    assert "UnableToModifyDuringSystemPOST" in str(exc.value) and bmc.url in str(exc.value)
    assert 2 <= len(bmc.requests("PATCH")) < 50


def test_other_4xx_is_not_retried(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    c = client(tmp_path, bmc)
    c.boot_state()
    bmc.statuses = [400]
    with pytest.raises(BmcError) as exc:
        c.set_boot_override("Pxe")
    assert len(bmc.requests("PATCH")) == 1  # a 4xx that is no busy refusal: not retried
    assert "HTTP 400" in str(exc.value) and "BootSourceOverrideTarget=Pxe" in str(exc.value)


@pytest.mark.parametrize("vendor,model", [("Dell Inc.", "PowerEdge R650"),
                                          ("Lenovo", "ThinkSystem SR630")])
def test_http_boot_uri_in_bios_attribute(tmp_path, mock_redfish_bmc, vendor, model):
    bmc = mock_redfish_bmc(vendor, model, http_boot_uri=False, bios_uri_attribute="HttpDev1Uri")
    c = client(tmp_path, bmc)
    c.set_boot_override("UefiHttp", "Once", "UEFI", URI)
    settings = bmc.requests("PATCH", SYSTEM + "/Bios/Settings")
    assert settings[0]["Attributes"]["HttpDev1Uri"] == URI
    if vendor.startswith("Dell"):
        assert settings[0]["Attributes"]["HttpDev1EnDis"] == "Enabled"
    boot_patch = bmc.requests("PATCH")[0]["Boot"]
    assert boot_patch["BootSourceOverrideTarget"] == "UefiHttp" and "HttpBootUri" not in boot_patch
    state = c.boot_state(http_boot_uri=True)
    # pending until the BIOS applies it at the reset
    assert (state.http_boot_uri_location, state.http_boot_uri_next) == ("Bios.HttpDev1Uri", URI)
    power.reset(c)
    assert c.boot_state(http_boot_uri=True).http_boot_uri == URI
    cleared = c.clear_boot_override()
    assert bmc.requests("PATCH", SYSTEM + "/Bios/Settings")[-1]["Attributes"]["HttpDev1Uri"] == ""
    assert any("Bios.HttpDev1Uri" in item for item in cleared)
    assert c.boot_state(http_boot_uri=True).http_boot_uri_next is None


def test_no_place_for_http_boot_uri(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso", http_boot_uri=False)
    with pytest.raises(BmcUnsupported) as exc:
        client(tmp_path, bmc).set_boot_override("UefiHttp", "Once", "UEFI", URI)
    assert "Boot.HttpBootUri" in str(exc.value) and bmc.url in str(exc.value)
    assert bmc.requests("PATCH") == []


def test_continuous_refused_falls_back_to_once_reapplied_before_reset(tmp_path,
                                                                      mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    bmc.refuse_continuous = True
    c = client(tmp_path, bmc)
    assert c.set_boot_override("UefiHttp", "Continuous", "UEFI", URI) == "Once"
    patches = bmc.requests("PATCH")
    assert patches[0]["Boot"]["BootSourceOverrideEnabled"] == "Continuous"  # refused
    assert patches[1]["Boot"]["BootSourceOverrideEnabled"] == "Once"
    bmc.boot["BootSourceOverrideEnabled"] = "Disabled"  # the Once was used by a boot
    del bmc.log[:]
    assert power.reset(c) == "On"
    methods = [(m, p.rsplit("/", 1)[-1]) for m, p, _ in bmc.log if m != "GET"]
    assert methods[:2] == [("PATCH", "1"), ("POST", "ComputerSystem.Reset")]
    # the re-applied Once took this boot (and was used up by it)
    assert bmc.boots[-1]["target"] == "UefiHttp" and bmc.boots[-1]["url"] == URI
    # once cleared, resets no longer re-apply it
    c.clear_boot_override()
    del bmc.log[:]
    power.reset(c)
    assert [m for m, _, _ in bmc.log if m == "PATCH"] == []


def test_continuous_not_in_allowable_values_goes_straight_to_once(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso", enabled_allowable=["Once", "Disabled"])
    assert client(tmp_path, bmc).set_boot_override("Pxe", "Continuous", "UEFI") == "Once"
    assert [p["Boot"]["BootSourceOverrideEnabled"] for p in bmc.requests("PATCH")] == ["Once"]


def test_supermicro_virtual_media_boots_as_usbcd(tmp_path, mock_redfish_bmc):
    from metalboot_redfish.virtual_media import RedfishVirtualMediaIpxeBootInterface as Vm
    sm = client(tmp_path, mock_redfish_bmc("Supermicro", "X12DPi"))
    other = client(tmp_path, mock_redfish_bmc("Contoso"))
    assert Vm.cd_target(sm.boot_state()) == "UsbCd"
    assert Vm.cd_target(other.boot_state()) == "Cd"


def _with_settings_object(bmc):
    """The system advertises a @Redfish.Settings object (DSP0266 "Settings"),
    as iDRAC10's, Lenovo SE450's and Nokia's do (openstack/sushy json_samples)."""
    bmc.docs[SYSTEM]["@Redfish.Settings"] = {"SettingsObject": {"@odata.id": SYSTEM + "/Settings"}}
    bmc.docs[SYSTEM + "/Settings"] = {"@odata.id": SYSTEM + "/Settings"}
    return bmc


def test_boot_goes_to_an_advertised_settings_object(tmp_path, mock_redfish_bmc):
    """Where the system advertises a settings object, Boot is written there (no
    PATCH of the system that a BMC like iDRAC10 refuses as read-only) and
    applies at the reset."""
    bmc = _with_settings_object(mock_redfish_bmc("Contoso"))
    c = client(tmp_path, bmc)
    c.set_boot_override("UefiHttp", "Once", "UEFI", URI)
    assert [p for m, p, _ in bmc.log if m == "PATCH"] == [SYSTEM + "/Settings"]
    assert bmc.docs[SYSTEM]["Boot"].get("HttpBootUri") != URI  # pending until the reset
    power.reset(c)
    assert bmc.docs[SYSTEM]["Boot"]["HttpBootUri"] == URI
    assert bmc.docs[SYSTEM]["Boot"]["BootSourceOverrideTarget"] == "UefiHttp"


def test_a_settings_object_that_refuses_boot_sends_it_to_the_system(tmp_path, mock_redfish_bmc):
    """A settings object that does not take Boot (400 PropertyUnknown): Boot
    goes to the system, and from then on straight there."""
    bmc = _with_settings_object(mock_redfish_bmc("Contoso"))
    bmc.refuse[("PATCH", "/Settings")] = (
        400, "Base.1.8.PropertyUnknown",
        "The property Boot is not in the list of valid properties for the resource.")
    c = client(tmp_path, bmc)
    c.set_boot_override("UefiHttp", "Once", "UEFI", URI)
    assert bmc.docs[SYSTEM]["Boot"]["HttpBootUri"] == URI
    c.clear_boot_override()
    assert [p for m, p, _ in bmc.log if m == "PATCH"] == [
        SYSTEM + "/Settings", SYSTEM, SYSTEM]
    assert bmc.docs[SYSTEM]["Boot"]["BootSourceOverrideEnabled"] == "Disabled"
