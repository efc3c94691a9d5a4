"""The BMC layer's plumbing: addresses, the connection cache, retries, messages."""

import logging
import threading
import time

import pytest
import sushy

from redfish_mock_bmc import SYSTEM, make_conf
from metalboot_framework.bmc import connection, media, power, redact, retry
from metalboot_framework.bmc.client import BmcClient
from metalboot_framework.exceptions import (BmcAuthError, BmcConnectionError, BmcError,
                                            InvalidInput)
from metalboot_framework.task import BmcInfo

PASSWORD = "Very-Secret-42"


@pytest.mark.parametrize("address,expected", [
    ("10.1.2.3", "https://10.1.2.3"), ("10.1.2.3:8443", "https://10.1.2.3:8443"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("https://[fd00::5]/redfish/v1", "https://[fd00::5]")])
def test_base_url(address, expected):
    assert connection.base_url(address) == expected


@pytest.mark.parametrize("address", ["", "ftp://x", "https://root:pw@10.0.0.1", "http://"])
def test_base_url_refuses(address):
    with pytest.raises(InvalidInput):
        connection.base_url(address)


def test_cache_creates_one_connection_per_bmc_and_user(mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    cache = connection.ConnectionCache(max_size=10, ttl=60)
    got = []
    threads = [threading.Thread(target=lambda: got.append(
        cache.get(bmc.url, "root", PASSWORD, False, 1, 2))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in got}) == 1
    # the service root is read when first needed, once, not by opening
    assert not [1 for m, p, _ in bmc.log if p == "/redfish/v1/"]
    threads = [threading.Thread(target=lambda: got[0].root) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len([1 for m, p, _ in bmc.log if p == "/redfish/v1/"]) == 1
    # another password (changed on the BMC) replaces the entry
    other = cache.get(bmc.url, "root", "new-password", False, 1, 2)
    assert other is not got[0] and len(cache) == 1
    cache.get(bmc.url, "operator", PASSWORD, False, 1, 2)
    assert len(cache) == 2
    small = connection.ConnectionCache(max_size=1, ttl=60)
    small.get(bmc.url, "a", PASSWORD, False, 1, 2)
    small.get(bmc.url, "b", PASSWORD, False, 1, 2)
    assert len(small) == 1
    cache.clear()
    small.clear()


@pytest.mark.parametrize("limit", [2, None])
def test_requests_at_once_per_bmc_follow_the_conf(tmp_path, mock_redfish_bmc, limit):
    """Six machines' steps on one BMC: [bmc] max_requests_per_bmc of them reach it
    at once, the others wait; the default (10) lets all six through."""
    bmc = mock_redfish_bmc("Contoso")
    conf = make_conf(tmp_path, **({"max_requests_per_bmc": limit} if limit else {}))
    clients = [BmcClient(conf, BmcInfo(bmc.url, "root", PASSWORD, False)) for _ in range(6)]
    clients[0].boot_state()  # the connection, opened once
    bmc.delay, bmc.most_active = 0.3, 0
    threads = [threading.Thread(target=c.boot_state) for c in clients[1:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bmc.most_active == (limit or 5)


def test_request_limit_holds_across_a_replaced_connection(tmp_path, mock_redfish_bmc):
    """A connection replaced while a request is under way on it (TTL, a new
    password, after an error) shares the BMC's limit with the new one."""
    bmc = mock_redfish_bmc("Contoso")
    conf = make_conf(tmp_path, max_requests_per_bmc=1)
    first, second = (BmcClient(conf, BmcInfo(bmc.url, "root", PASSWORD, False))
                     for _ in range(2))
    first.boot_state()
    bmc.delay, bmc.most_active = 0.5, 0
    under_way = threading.Thread(target=first.boot_state)
    under_way.start()
    while not bmc.active:
        time.sleep(0.01)
    connection.CACHE.invalidate(bmc.url, "root")  # the next request opens a new one
    second.boot_state()
    under_way.join()
    assert bmc.most_active == 1


def test_5xx_retried_then_success(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    c = BmcClient(make_conf(tmp_path), BmcInfo(bmc.url, "root", PASSWORD, False))
    c.boot_state()
    bmc.statuses = [503, 500]
    c.set_boot_override("Pxe", "Once", "UEFI")
    assert bmc.boot["BootSourceOverrideTarget"] == "Pxe"


def test_4xx_not_retried(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    c = BmcClient(make_conf(tmp_path), BmcInfo(bmc.url, "root", PASSWORD, False))
    c.boot_state()
    n = len(bmc.log)
    bmc.statuses = [403]
    with pytest.raises(BmcAuthError):
        c.boot_state()
    # sent once; the service root is read (without credentials) for the message
    assert [r[:2] for r in bmc.log[n:]] == [("GET", bmc.system_path), ("GET", "/redfish/v1/")]
    bmc.statuses = [404]
    with pytest.raises(BmcError) as exc:
        c.boot_state()
    assert "404" in str(exc.value)


def test_translate_names_everything_and_scrubs_password():
    class Resp:
        status_code = 500

        def json(self):
            return {"error": {"code": "X", "message": f"bad password {PASSWORD}"}}

    exc = sushy.exceptions.ServerSideError("PATCH", "https://10.0.0.9/redfish/v1/Systems/1",
                                           Resp())
    err = retry.translate(exc, address="10.0.0.9", system="/redfish/v1/Systems/1",
                          operation="PATCH Boot.HttpBootUri", password=PASSWORD, attempts=5)
    text = str(err)
    assert "BMC 10.0.0.9" in text and "/redfish/v1/Systems/1" in text
    assert "Boot.HttpBootUri" in text and "after 5 attempt(s)" in text
    assert PASSWORD not in text and redact.MASK in text
    assert (err.address, err.operation, err.status_code) == ("10.0.0.9", "PATCH Boot.HttpBootUri",
                                                             500)


def test_log_filter_masks_registered_passwords(caplog):
    redact.register_secret(PASSWORD)
    caplog.set_level(logging.DEBUG)
    logging.getLogger("sushy.connector").warning("echo %s from BMC", PASSWORD)
    assert caplog.records and all(PASSWORD not in r.getMessage() for r in caplog.records)
    assert redact.MASK in caplog.records[-1].getMessage()


def test_every_registered_password_is_masked_in_a_fleet_of_them():
    """One password per BMC of a fleet: masked whether it is in the automaton or
    registered since; a password containing another is masked whole; a
    forgotten one no more."""
    fleet = [f"fleet-pw-{n:05d}-{n * 7919 % 10007:05d}" for n in range(3 * redact.REBUILD_AFTER)]
    for password in fleet:
        redact.register_secret(password)
    try:
        for password in (fleet[0], fleet[redact.REBUILD_AFTER + 1], fleet[-1]):
            assert redact.scrub(f"BMC said: bad password {password}!") == \
                f"BMC said: bad password {redact.MASK}!"
        longer = fleet[5] + "-suffix"
        redact.register_secret(longer)
        assert redact.scrub(f"a {longer} b {fleet[5]} c") == f"a {redact.MASK} b {redact.MASK} c"
        # overlapping, neither containing the other: masked as one
        redact.register_secret("overlap-abc-def")
        redact.register_secret("def-ghi-overlap")
        assert redact.scrub("u:overlap-abc-def-ghi-overlap!") == f"u:{redact.MASK}!"
        assert redact.scrub("overlap-abc-def") == redact.MASK
        redact.register_secret("ab")  # too short to mask
        assert redact.scrub("ab cd") == "ab cd"
        redact.forget_secret(fleet[1])
        assert redact.scrub(f"x {fleet[1]} {fleet[2]}") == f"x {fleet[1]} {redact.MASK}"
    finally:
        for password in fleet + [fleet[5] + "-suffix", "overlap-abc-def", "def-ghi-overlap"]:
            redact.forget_secret(password)
    assert redact.scrub(f"x {fleet[2]}") == f"x {fleet[2]}"


def test_connection_refused_retried_with_backoff(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = make_conf(tmp_path, retry_attempts=4, retry_interval=0.05, retry_max_interval=0.1)
    c = BmcClient(conf, BmcInfo(f"http://127.0.0.1:{port}", "root", PASSWORD, False), "7")
    import time
    start = time.monotonic()
    with pytest.raises(BmcConnectionError) as exc:
        power.power_on(c)
    elapsed = time.monotonic() - start
    assert 0.05 + 0.1 + 0.1 <= elapsed < 3  # waited 0.05, 0.1, 0.1 (capped)
    assert "after 4 attempt(s)" in str(exc.value) and "/redfish/v1/Systems/7" in str(exc.value)
    assert "read PowerState" in str(exc.value)


def test_manager_virtual_media_and_reset(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Dell Inc.", "R650")
    c = BmcClient(make_conf(tmp_path), BmcInfo(bmc.url, "root", PASSWORD, False))
    device = media.insert_cd(c, "http://[fd00::1]:6480/x.iso")
    assert device.id == "CD1"
    cd = bmc.docs["/redfish/v1/Managers/1/VirtualMedia/CD1"]
    assert cd["Inserted"] and cd["Image"] == "http://[fd00::1]:6480/x.iso"
    assert [d.id for d in media.eject_all(c)] == ["CD1"]
    assert not bmc.docs["/redfish/v1/Managers/1/VirtualMedia/CD1"]["Inserted"]
    assert power.power_off(c) == "Off" and bmc.docs[SYSTEM]["PowerState"] == "Off"
    assert power.reset(c) == "On"
    resets = [b["ResetType"] for m, p, b in bmc.log if p.endswith("ComputerSystem.Reset")]
    assert resets == ["ForceOff", "On"]
    power.reset(c)
    assert [b["ResetType"] for m, p, b in bmc.log
            if p.endswith("ComputerSystem.Reset")][-1] == "ForceRestart"


def _made(bmc, start=0):
    return [(m, p) for m, p, _ in bmc.log[start:]]


def test_connection_remembers_quirks_and_virtual_media_of_a_system(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Dell Inc.", "R650")  # virtual media under the manager
    vm = "/redfish/v1/Managers/1/VirtualMedia"
    conf = make_conf(tmp_path)
    media.devices(BmcClient(conf, BmcInfo(bmc.url, "root", PASSWORD, False)))
    assert _made(bmc) == [("GET", "/redfish/v1/"), ("GET", "/redfish/v1/Systems"),
                          ("GET", SYSTEM), ("GET", "/redfish/v1/Managers/1"),
                          ("GET", vm), ("GET", vm + "/CD1")]
    # the next step's client (same BMC connection) goes straight to the devices
    start = len(bmc.log)
    again = BmcClient(conf, BmcInfo(bmc.url, "root", PASSWORD, False))
    assert again.quirks().name == "dell"
    assert [d.id for d in media.devices(again)] == ["CD1"]
    assert _made(bmc, start) == [("GET", vm + "/CD1")]
    # the collection and its device moved (a BMC update): looked up again
    moved = "/redfish/v1/Managers/1/VM"
    bmc.docs[moved] = {"Members": [{"@odata.id": moved + "/CD1"}]}
    bmc.docs[moved + "/CD1"] = dict(bmc.docs.pop(vm + "/CD1"), **{"@odata.id": moved + "/CD1"})
    bmc.docs["/redfish/v1/Managers/1"]["VirtualMedia"] = {"@odata.id": moved}
    del bmc.docs[vm]
    start = len(bmc.log)
    found = media.devices(BmcClient(conf, BmcInfo(bmc.url, "root", PASSWORD, False)))
    assert [(d.id, d.path) for d in found] == [("CD1", moved + "/CD1")]
    assert _made(bmc, start) == [("GET", vm + "/CD1"), ("GET", SYSTEM),
                                 ("GET", "/redfish/v1/Managers/1"), ("GET", moved),
                                 ("GET", moved + "/CD1")]


def test_boot_patch_and_reset_reuse_a_read_until_they_change_it(tmp_path, mock_redfish_bmc):
    bmc = mock_redfish_bmc("Contoso")
    c = BmcClient(make_conf(tmp_path), BmcInfo(bmc.url, "root", PASSWORD, False), "1")
    c.boot_state()
    start = len(bmc.log)
    c.set_boot_override("Cd", "Once", "UEFI")  # decided on the read above
    assert _made(bmc, start) == [("PATCH", SYSTEM)]
    c.set_boot_override("Pxe", "Once", "UEFI")  # Boot changed since: read again
    assert _made(bmc, start + 1) == [("GET", SYSTEM), ("PATCH", SYSTEM)]
    start = len(bmc.log)
    assert power.reset(c) == "On"  # PowerState and the reset action from that read
    assert _made(bmc, start)[:1] == [("POST", SYSTEM + "/Actions/ComputerSystem.Reset")]
    assert set(_made(bmc, start)[1:]) == {("GET", SYSTEM)}
    start = len(bmc.log)
    c.set_boot_override("Cd", "Once", "UEFI")  # the last poll's read, after the reset
    assert _made(bmc, start) == [("PATCH", SYSTEM)]
    start = len(bmc.log)
    assert power.reset(c, wait=False) is None  # a Boot PATCH leaves PowerState as read
    assert _made(bmc, start) == [("POST", SYSTEM + "/Actions/ComputerSystem.Reset")]
    start = len(bmc.log)
    c.set_boot_override("Pxe", "Once", "UEFI")  # nothing left to reuse after a reset
    assert _made(bmc, start) == [("GET", SYSTEM), ("PATCH", SYSTEM)]
    # a retried attempt (5xx) reads the system again
    c.boot_state()
    start = len(bmc.log)
    bmc.statuses = [503]
    c.set_boot_override("Cd", "Once", "UEFI")
    assert _made(bmc, start) == [("PATCH", SYSTEM), ("GET", SYSTEM), ("PATCH", SYSTEM)]
    assert bmc.boot["BootSourceOverrideTarget"] == "Cd"
