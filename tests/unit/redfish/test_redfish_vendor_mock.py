"""The mock BMC itself: its corpus is sourced and it behaves as the vendors document."""

import json
import os

import pytest
import requests

from redfish_mock_bmc import CORPUS
from vendor_behaviour import DELL_SYSTEM, PROFILES

VENDORS = sorted(PROFILES)


@pytest.mark.parametrize("vendor", VENDORS)
def test_every_corpus_file_names_its_source(vendor):
    folder = os.path.join(CORPUS, vendor)
    with open(os.path.join(folder, "SOURCES.json")) as f:
        sources = json.load(f)["documents"]
    files = {n for n in os.listdir(folder) if n != "SOURCES.json"}
    assert files == set(sources)
    assert all(s.startswith("github:") and "@" in s for s in sources.values())
    for _path, _patch, source in PROFILES[vendor].overlays:
        assert source


def _get(bmc, path):
    return requests.get(bmc.url + path, timeout=5)


def test_dell_bios_settings_stay_pending_without_a_job(vendor_bmc):
    bmc = vendor_bmc("dell-idrac9")
    settings = DELL_SYSTEM + "/Bios/Settings"
    etag = _get(bmc, settings).headers["ETag"]
    assert requests.patch(bmc.url + settings, json={"Attributes": {"HttpDev1Uri": "http://x/"}},
                          headers={"If-Match": etag}, timeout=5).status_code == 200
    requests.post(bmc.url + DELL_SYSTEM + "/Actions/ComputerSystem.Reset",
                  json={"ResetType": "ForceRestart"}, timeout=5)
    assert bmc.bios_attributes["HttpDev1Uri"] == ""  # still pending
    requests.post(bmc.url + "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs",
                  json={"TargetSettingsURI": settings}, timeout=5)
    requests.post(bmc.url + DELL_SYSTEM + "/Actions/ComputerSystem.Reset",
                  json={"ResetType": "ForceRestart"}, timeout=5)
    assert bmc.bios_attributes["HttpDev1Uri"] == "http://x/"
    assert bmc.resets == ["ForceRestart", "ForceRestart"]
    assert bmc.counts["POST"] == 3 and bmc.counts["PATCH"] == 1


def test_lenovo_wants_if_match_from_the_body_etag(vendor_bmc):
    bmc = vendor_bmc("lenovo-xcc")
    answer = _get(bmc, "/redfish/v1/Systems/1")
    assert "ETag" not in answer.headers and answer.json()["@odata.etag"]
    patch = {"Boot": {"BootSourceOverrideTarget": "Pxe"}}
    assert requests.patch(bmc.url + "/redfish/v1/Systems/1", json=patch,
                          timeout=5).status_code == 428
    assert requests.patch(bmc.url + "/redfish/v1/Systems/1", json=patch, timeout=5,
                          headers={"If-Match": answer.json()["@odata.etag"]}).status_code == 204


def test_idrac10_boot_is_read_only_on_the_system(vendor_bmc):
    bmc = vendor_bmc("dell-idrac10")
    patch = {"Boot": {"BootSourceOverrideTarget": "Pxe"}}
    answer = requests.patch(bmc.url + DELL_SYSTEM, json=patch, timeout=5)
    assert answer.status_code == 400 and "PropertyNotWritable" in answer.text
    assert requests.patch(bmc.url + DELL_SYSTEM + "/Settings", json=patch,
                          timeout=5).status_code == 200
    assert bmc.boot["BootSourceOverrideTarget"] == "None"  # until the reset
    requests.post(bmc.url + DELL_SYSTEM + "/Actions/ComputerSystem.Reset",
                  json={"ResetType": "On"}, timeout=5)
    assert bmc.boot["BootSourceOverrideTarget"] == "Pxe"


def test_faults(vendor_bmc):
    bmc = vendor_bmc("dmtf-public-rackmount1", password="right-one")
    assert _get(bmc, "/redfish/v1/Systems").status_code == 401
    assert requests.get(bmc.url + "/redfish/v1/Systems", auth=("root", "right-one"),
                        timeout=5).status_code == 200
    bmc.password, bmc.fail_rate = None, 1.0
    assert _get(bmc, "/redfish/v1/Systems").status_code == 503
    bmc.fail_rate = 0.0
    bmc.slow[("GET", "/Systems")] = 0.5
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(bmc.url + "/redfish/v1/Systems", timeout=0.2)
    bmc.kill()
    with pytest.raises(requests.exceptions.ConnectionError):
        _get(bmc, "/redfish/v1/Systems")
