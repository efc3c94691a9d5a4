"""Which client addresses make a fetch of boot.ipxe by MAC boot evidence
(metalboot_framework.address_binding), through the Flask blueprint with the
client address a real connection would have."""

import subprocess
import sys
import time

import pytest

from metalboot_framework.dhcp import leases as leases_module
from metalboot_framework.address_binding import eui64_interface_id
from tests.conftest import machine_body

MAC1 = "52:54:00:00:00:01"  # machine_body(1)'s NIC


@pytest.fixture
def leases(tmp_path):
    return tmp_path / "dnsmasq.leases"


@pytest.fixture
def kea_leases(tmp_path):
    return tmp_path / "kea-leases6.csv"


@pytest.fixture
def conf(conf, leases, kea_leases):
    """No loopback: a prefix of partition p1, dnsmasq's and Kea's lease files."""
    conf.set_override("boot_network_prefixes", ["p1=2001:db8:77::/48", "198.51.100.0/24"],
                      group="artifacts")
    conf.set_override("lease_file", str(leases), group="dnsmasq")
    conf.set_override("lease_file", str(kea_leases), group="kea")
    return conf


def fetch_by_mac(app, mac, address, interface="fake"):
    return app.test_client().get(f"/boot/mac/{mac}/{interface}/boot.ipxe",
                                 environ_base={"REMOTE_ADDR": address})


def last_evidence(api, machine_id):
    return api.get(f"/v1/machines/{machine_id}/evidence").json["evidence"][-1]


def token_in(response):
    return response.data.decode().split("METAL_BOOT_TOKEN=", 1)[1].split()[0]


def test_eui64_is_rfc4291_appendix_a():
    # RFC 4291 appendix A's example: 34-56-78-9A-BC-DE -> 3656:78ff:fe9a:bcde
    assert eui64_interface_id("34:56:78:9a:bc:de") == 0x365678fffe9abcde


@pytest.mark.parametrize("address, binding", [
    ("fd55::5054:ff:fe00:1", "eui64"),            # SLAAC under any prefix
    ("fe80::5054:ff:fe00:1", "eui64"),            # link-local
    ("2001:db8:77:5::9", "prefix"),               # p1's prefix
    ("198.51.100.7", "prefix"),                   # every partition's prefix
    ("::ffff:198.51.100.7", "prefix"),            # IPv4-mapped, as a dual-stack socket gives it
    ("fd55::5054:ff:fe00:2", "unbound"),          # another MAC's EUI-64
    ("fd55::1234:5678:9abc:def0", "unbound"),     # a privacy address: not the machine's
    ("127.0.0.1", "unbound"),                     # loopback only if a prefix says so
    ("2001:db8:78::9", "unbound"),
])
def test_a_fetch_by_mac_is_evidence_only_from_a_bound_address(app, api, services, partition,
                                                              address, binding):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    r = fetch_by_mac(app, MAC1, address)
    assert r.status_code == 200  # served in any case: a real machine must boot
    task = services.task(mid, "fake")
    ev = last_evidence(api, mid)
    assert ev["client_address"] == address and ev["path"] == "boot.ipxe"
    if binding == "unbound":
        assert ev["kind"] == "unverified"
        assert token_in(r) == services.tokens.unbound_token(mid, 1, "fake") != task.token
    else:
        assert ev["kind"] == "fetch"
        assert token_in(r) == task.token
    # the plugin's rule sees only what proves the boot
    from metalboot_framework.conductor.evidence import evidence_of
    with services.db.read_conn() as conn:
        [record] = evidence_of(conn, [mid])[mid]
    assert record.data == {"by_mac": binding}
    from metalboot_framework.boot_interface import Evidence
    recognised = services.interfaces.get("fake").recognise_evidence(task, [Evidence(
        record.id, mid, "fake", record.kind, record.path, record.client_address,
        record.created_at)])
    assert (recognised is not None) == (binding != "unbound")


def test_a_prefix_binds_the_machines_of_its_partition_only(app, api, partition):
    assert api.post("/v1/partitions", json={"id": "p2"}).status_code == 201
    mid = api.post("/v1/machines", json=machine_body(2, partition="p2")).json["id"]
    fetch_by_mac(app, "52:54:00:00:00:02", "2001:db8:77::9")
    assert last_evidence(api, mid)["kind"] == "unverified"


def test_registered_nic_addresses_and_dnsmasq_leases_bind(app, api, partition, leases):
    body = machine_body(3, nics=[{"mac": "52:54:00:00:00:03", "ipv4_address": "10.9.0.5"},
                                 {"mac": "52:54:00:00:00:33"}])
    mid = api.post("/v1/machines", json=body).json["id"]
    fetch_by_mac(app, "52:54:00:00:00:03", "10.9.0.5")
    assert last_evidence(api, mid)["kind"] == "fetch"
    # dnsmasq's lease file: a live lease of the second NIC, an expired one of the first
    leases.write_text("0 52:54:00:00:00:33 10.55.0.123 host1 *\n"
                      "1 52:54:00:00:00:03 10.55.0.124 host1 01:52:54:00:00:00:03\n"
                      "duid 00:01:00:01:2a:3b:4c:5d:52:54:00:aa:bb:01\n"
                      "0 1234 fd55::99 host1 00:01:00:01\n")
    for address, kind in (("10.55.0.123", "fetch"), ("10.55.0.124", "unverified"),
                          ("fd55::99", "unverified"), ("10.55.0.125", "unverified")):
        fetch_by_mac(app, "52:54:00:00:00:03", address)
        assert last_evidence(api, mid)["kind"] == kind, address
    # a released lease is trusted no longer than RECHECK after the last look;
    # a lease granted since the file was read is seen at once
    leases.write_text("0 52:54:00:00:00:33 10.55.0.126 host1 *\n")
    time.sleep(leases_module.RECHECK)
    fetch_by_mac(app, "52:54:00:00:00:03", "10.55.0.123")
    assert last_evidence(api, mid)["kind"] == "unverified"
    leases.write_text("0 52:54:00:00:00:33 10.55.0.127 host1 *\n")
    fetch_by_mac(app, "52:54:00:00:00:03", "10.55.0.127")
    assert last_evidence(api, mid)["kind"] == "fetch"


#: Kea 2.2's memfile lease6 header, as kea-dhcp6 writes it
KEA_HEADER = ("address,duid,valid_lifetime,expire,subnet_id,pref_lifetime,lease_type,iaid,"
              "prefix_len,fqdn_fwd,fqdn_rev,hostname,hwaddr,state,user_context,hwtype,"
              "hwaddr_source\n")


def kea_row(address, mac, expire, valid=3600, lease_type=0, state=0):
    return (f"{address},00:03:00:01:{mac},{valid},{expire},1,3000,{lease_type},1,128,0,0,,"
            f"{mac},{state},,1,2\n")


def test_kea_dhcpv6_leases_bind(app, api, partition, kea_leases):
    body = machine_body(4, nics=[{"mac": "52:54:00:00:00:04"}, {"mac": "52:54:00:00:00:44"}])
    mid = api.post("/v1/machines", json=body).json["id"]
    later = int(time.time()) + 3600
    # the last row of an address holds; LFC's older file is read first
    kea_leases.with_name(kea_leases.name + ".1").write_text(
        KEA_HEADER + kea_row("fd55::1001", "52:54:00:00:00:44", later)
        + kea_row("fd55::1006", "52:54:00:00:00:44", later))
    kea_leases.write_text(
        KEA_HEADER + kea_row("fd55::1002", "52:54:00:00:00:04", later - 7200)  # expired
        + kea_row("fd55::1003", "52:54:00:00:00:44", later, state=1)           # declined
        + kea_row("fd55::1004", "52:54:00:00:00:99", later)                    # another MAC
        + kea_row("fd55::1005", "52:54:00:00:00:04", later, lease_type=2)      # a prefix
        + kea_row("fd55::1006", "52:54:00:00:00:44", later, valid=0))          # released
    for address, kind in (("fd55::1001", "fetch"), ("fd55::1002", "unverified"),
                          ("fd55::1003", "unverified"), ("fd55::1004", "unverified"),
                          ("fd55::1005", "unverified"), ("fd55::1006", "unverified")):
        fetch_by_mac(app, "52:54:00:00:00:04", address)
        assert last_evidence(api, mid)["kind"] == kind, address
    # a lease granted since the file was read is seen at once
    with open(kea_leases, "a") as f:
        f.write(kea_row("fd55::1007", "52:54:00:00:00:04", later))
    fetch_by_mac(app, "52:54:00:00:00:04", "fd55::1007")
    bound = last_evidence(api, mid)
    assert (bound["kind"], bound["binding"]) == ("fetch", "dhcp-lease")
    # the lease that bound it is kept with the evidence
    assert bound["lease"] == {"address": "fd55::1007", "mac": "52:54:00:00:00:04",
                              "expires": later, "server": "Kea"}


def test_a_bad_prefix_stops_the_server_naming_the_option(tmp_path):
    conf = tmp_path / "metalboot.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}/state\n"
                    "[artifacts]\nboot_network_prefixes = p1=10.0.0.0/33\n")
    r = subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.server",
                        "--config-file", str(conf)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "[artifacts] boot_network_prefixes" in r.stderr and "10.0.0.0/33" in r.stderr


def _dropped(app):
    """metalboot_unverified_evidence_dropped_total{boot_interface="fake"} of GET /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    text = app.test_client().get("/metrics", headers={
        "Authorization": "Bearer reader-token-for-tests"}).get_data(as_text=True)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "metalboot_unverified_evidence_dropped_total" and \
                    sample.labels == {"boot_interface": "fake"}:
                return sample.value
    return 0


def test_unverified_evidence_is_bounded_per_machine(app, api, partition, conf):
    """Anyone who knows a MAC may fetch its boot.ipxe and report with the token
    in it: the unverified rows that leaves are bounded, the newest kept, the
    drops counted; evidence that proves a boot is never dropped."""
    conf.set_override("max_unverified_evidence", 3, group="artifacts")
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    other = api.post("/v1/machines", json=machine_body(2)).json["id"]
    before = _dropped(app)
    assert fetch_by_mac(app, MAC1, "198.51.100.7").status_code == 200  # bound: proves
    assert fetch_by_mac(app, "52:54:00:00:00:02", "203.0.113.9").status_code == 200
    for _ in range(5):
        r = fetch_by_mac(app, MAC1, "203.0.113.9")
        assert r.status_code == 200
    r = app.test_client().post(f"/v1/machines/{mid}/boot-report",
                               json={"boot_interface": "fake", "token": token_in(r),
                                     "message": "newest"},
                               environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert r.status_code == 201
    evidence = api.get(f"/v1/machines/{mid}/evidence").json["evidence"]
    unverified = [e for e in evidence if e["kind"] == "unverified"]
    assert [e["path"] for e in unverified] == ["boot.ipxe", "boot.ipxe", "boot-report"]
    assert unverified[-1]["id"] == r.json["evidence_id"]
    assert [e["kind"] for e in evidence if e["kind"] != "unverified"] == ["fetch"]
    assert len(api.get(f"/v1/machines/{other}/evidence").json["evidence"]) == 1
    assert _dropped(app) - before == 3
