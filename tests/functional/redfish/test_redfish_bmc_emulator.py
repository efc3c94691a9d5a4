"""The BMC layer (metalboot_framework.bmc) against real sushy-emulator processes."""

import logging
import threading
import time

import pytest

from redfish_emulator_harness import BMC_PASSWORD, BMC_USER, fake_system, make_conf
from metalboot_framework.bmc import connection as bmc_connection
from metalboot_framework.bmc import media, power
from metalboot_framework.bmc.client import BmcClient
from metalboot_framework.exceptions import (BmcAuthError, BmcConnectionError, BmcError,
                                            BmcUnsupported)
from metalboot_framework.task import BmcInfo

pytestmark = pytest.mark.functional


def client(tmp_path, url, system_id, password=BMC_PASSWORD, username=BMC_USER, **bmc):
    conf = make_conf(tmp_path / "conf-state", "http://127.0.0.1:9", **bmc)
    return BmcClient(conf, BmcInfo(url, username, password, False), system_id)


def test_uefi_http_override_is_stored_per_system(tmp_path, sushy_emulator_with_http_boot_uri):
    a, b = fake_system("a"), fake_system("b")
    emu = sushy_emulator_with_http_boot_uri([a, b])
    c = client(tmp_path, emu.url, a["uuid"])
    assert c.set_boot_override("UefiHttp", "Once", "UEFI",
                               "http://127.0.0.1:6480/boot/a/x/t/ipxe.iso") == "Once"
    boot = emu.system(a["uuid"])["Boot"]
    assert boot["BootSourceOverrideTarget"] == "UefiHttp"
    assert boot["BootSourceOverrideEnabled"] == "Once"
    assert boot["BootSourceOverrideMode"] == "UEFI"
    assert boot["HttpBootUri"] == "http://127.0.0.1:6480/boot/a/x/t/ipxe.iso"
    # the other system on the same BMC is untouched
    other = emu.system(b["uuid"])["Boot"]
    assert other["HttpBootUri"] is None and other["BootSourceOverrideEnabled"] == "Disabled"
    state = c.boot_state()
    assert (state.target, state.enabled, state.http_boot_uri_location) == \
        ("UefiHttp", "Once", "Boot.HttpBootUri")

    cleared = c.clear_boot_override()
    assert any("HttpBootUri" in item for item in cleared)
    boot = emu.system(a["uuid"])["Boot"]
    assert boot["HttpBootUri"] is None and boot["BootSourceOverrideEnabled"] == "Disabled"
    assert c.clear_boot_override() == []  # idempotent


def test_power_on_off_reset_poll_until_applied(tmp_path, sushy_emulator_with_http_boot_uri):
    s = fake_system("p")
    emu = sushy_emulator_with_http_boot_uri([s], power_delay=(0.3, 0.4))
    c = client(tmp_path, emu.url, s["uuid"])
    start = time.monotonic()
    assert power.power_on(c) == "On"
    assert time.monotonic() - start >= 0.3  # it waited for the late change
    assert emu.system(s["uuid"])["PowerState"] == "On"
    assert power.power_off(c) == "Off"
    assert emu.system(s["uuid"])["PowerState"] == "Off"
    assert power.reset(c) == "On"  # from Off: powers on
    start = time.monotonic()
    assert power.reset(c) == "On"  # from On: ForceRestart, Off then On
    assert time.monotonic() - start >= 0.3
    assert emu.system(s["uuid"])["PowerState"] == "On"


def test_power_timeout_names_bmc_system_and_action(tmp_path, sushy_emulator_with_http_boot_uri):
    s = fake_system("slowpower")
    emu = sushy_emulator_with_http_boot_uri([s], power_delay=(3, 4))
    c = client(tmp_path, emu.url, s["uuid"], power_timeout=0.3)
    with pytest.raises(BmcError) as exc:
        power.power_on(c)
    message = str(exc.value)
    assert emu.url in message and s["uuid"] in message and "ComputerSystem.Reset" in message
    assert "expected On" in message


def test_several_emulators_keep_separate_state(tmp_path, sushy_emulator_with_http_boot_uri):
    s = fake_system("same")
    emu1 = sushy_emulator_with_http_boot_uri([s])
    emu2 = sushy_emulator_with_http_boot_uri([s])
    client(tmp_path, emu1.url, s["uuid"]).set_boot_override("Pxe", "Once", "UEFI")
    assert emu1.system(s["uuid"])["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert emu2.system(s["uuid"])["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_connection_is_reused_per_bmc_and_user(tmp_path, sushy_emulator_with_http_boot_uri):
    a, b = fake_system("ca"), fake_system("cb")
    emu = sushy_emulator_with_http_boot_uri([a, b])
    c1, c2 = client(tmp_path, emu.url, a["uuid"]), client(tmp_path, emu.url, b["uuid"])
    results = []
    threads = [threading.Thread(target=lambda c=c: results.append(c.connection()))
               for c in (c1, c2) * 5]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in results}) == 1
    assert len(bmc_connection.CACHE) == 1
    c1.boot_state(), c2.boot_state()
    assert len(bmc_connection.CACHE) == 1
    other_user = client(tmp_path, emu.url, a["uuid"], username="operator")
    assert other_user.connection() is not c1.connection()
    assert len(bmc_connection.CACHE) == 2


def test_virtual_media_insert_and_eject(tmp_path, sushy_emulator_with_http_boot_uri,
                                        partition_artifact_server):
    partition_artifact_server.extra["/some.iso"] = b"ISO" * 100
    s = fake_system("vm")
    emu = sushy_emulator_with_http_boot_uri([s])
    c = client(tmp_path, emu.url, s["uuid"])
    device = media.insert_cd(c, partition_artifact_server.url + "/some.iso")
    assert device.id == "Cd"
    cd = emu.media(s["uuid"])["Cd"]
    assert cd["Inserted"] is True and cd["Image"] == partition_artifact_server.url + "/some.iso"
    assert [d.id for d in media.eject_all(c)] == ["Cd"]
    assert emu.media(s["uuid"])["Cd"]["Inserted"] is False
    assert media.eject_all(c) == []


# -- faults -------------------------------------------------------------------------
def test_bmc_not_listening(tmp_path):
    from redfish_emulator_harness import free_port
    url = f"http://127.0.0.1:{free_port()}"
    c = client(tmp_path, url, "sys-1", retry_attempts=3)
    start = time.monotonic()
    with pytest.raises(BmcConnectionError) as exc:
        c.set_boot_override("Pxe")
    message = str(exc.value)
    assert url in message and "sys-1" in message and "BootSourceOverrideTarget" in message
    assert "after 3 attempt(s)" in message
    assert time.monotonic() - start < 5


def test_share_of_500s_succeeds_after_retries(tmp_path, sushy_emulator_with_http_boot_uri,
                                              fault_injecting_proxy):
    s = fake_system("flaky")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port, fail_first=1, fail_every=3)
    c = client(tmp_path, proxy.url, s["uuid"], retry_attempts=4)
    c.set_boot_override("UefiHttp", "Once", "UEFI", "http://127.0.0.1:1/ipxe.iso")
    assert power.power_on(c) == "On"
    assert proxy.failed >= 2
    boot = emu.system(s["uuid"])["Boot"]
    assert boot["BootSourceOverrideTarget"] == "UefiHttp"
    assert boot["HttpBootUri"] == "http://127.0.0.1:1/ipxe.iso"


def test_persistent_500_gives_clear_error_after_exact_attempts(
        tmp_path, sushy_emulator_with_http_boot_uri, fault_injecting_proxy):
    s = fake_system("broken")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port)
    c = client(tmp_path, proxy.url, s["uuid"], retry_attempts=3)
    c.boot_state()  # connect and read quirks
    proxy.fail_first = 10 ** 6
    before = proxy.requests
    with pytest.raises(BmcError) as exc:
        c.set_boot_override("Pxe")
    assert proxy.requests - before == 3  # our 3 attempts, no hidden sushy retries
    message = str(exc.value)
    assert proxy.url in message and s["uuid"] in message and "HTTP 500" in message
    assert "BootSourceOverrideTarget=Pxe" in message


def test_slow_bmc_times_out_then_succeeds(tmp_path, sushy_emulator_with_http_boot_uri,
                                          fault_injecting_proxy):
    s = fake_system("slow")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port, slow_first=2, delay=1.0)
    c = client(tmp_path, proxy.url, s["uuid"], read_timeout=0.4, retry_attempts=4)
    assert c.boot_state().target == "Hdd"
    assert proxy.delayed == 2


def test_always_slow_bmc_gives_connection_error(tmp_path, sushy_emulator_with_http_boot_uri,
                                                fault_injecting_proxy):
    s = fake_system("veryslow")
    emu = sushy_emulator_with_http_boot_uri([s])
    proxy = fault_injecting_proxy(emu.port, slow_first=-1, delay=0.6)
    c = client(tmp_path, proxy.url, s["uuid"], read_timeout=0.2, retry_attempts=2)
    with pytest.raises(BmcConnectionError) as exc:
        c.boot_state()
    assert proxy.url in str(exc.value) and "timed out" in str(exc.value).lower()


def test_wrong_credentials_not_retried_and_password_never_shown(
        tmp_path, sushy_emulator_with_http_boot_uri, fault_injecting_proxy, caplog):
    s = fake_system("auth")
    emu = sushy_emulator_with_http_boot_uri([s], auth=(BMC_USER, BMC_PASSWORD))
    proxy = fault_injecting_proxy(emu.port)
    caplog.set_level(logging.DEBUG)
    wrong = "Wrong-Pass-9876"
    c = client(tmp_path, proxy.url, s["uuid"], password=wrong, retry_attempts=4)
    with pytest.raises(BmcAuthError) as exc:
        c.set_boot_override("Pxe")
    message = str(exc.value)
    assert proxy.url in message and s["uuid"] in message and "HTTP 401" in message
    assert BMC_USER in message
    assert wrong not in message and BMC_PASSWORD not in message
    # root (anonymous) + one refused GET of the system: no retry of a 4xx
    assert [m for m, p, _ in proxy.log if "Systems" in p] == ["GET"]
    assert all(wrong not in r.getMessage() for r in caplog.records)
    # the right password works (the cached connection is replaced)
    good = client(tmp_path, proxy.url, s["uuid"])
    good.set_boot_override("Pxe", "Once", "UEFI")
    assert emu.system(s["uuid"])["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert all(BMC_PASSWORD not in r.getMessage() for r in caplog.records)


def test_system_without_uefi_http(tmp_path, sushy_emulator_with_http_boot_uri):
    s = fake_system("legacy", boot_mode="Legacy")
    emu = sushy_emulator_with_http_boot_uri([s])
    c = client(tmp_path, emu.url, s["uuid"])
    state = c.boot_state(http_boot_uri=True)
    assert "UefiHttp" not in state.allowed_targets and state.http_boot_uri_location is None
    with pytest.raises(BmcUnsupported) as exc:
        c.set_boot_override("UefiHttp", "Once", "UEFI", "http://127.0.0.1:1/x.iso")
    message = str(exc.value)
    assert emu.url in message and s["uuid"] in message and "UefiHttp" in message
    assert "AllowableValues" in message
    assert emu.system(s["uuid"])["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_unknown_system_is_named(tmp_path, sushy_emulator_with_http_boot_uri):
    emu = sushy_emulator_with_http_boot_uri([fake_system("known")])
    c = client(tmp_path, emu.url, "no-such-system")
    with pytest.raises(BmcUnsupported) as exc:
        c.boot_state()
    assert "no-such-system" in str(exc.value) and emu.url in str(exc.value)
    assert "404" in str(exc.value)
