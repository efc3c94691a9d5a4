"""A fetch of boot.ipxe by MAC from loopback proves no boot unless a loopback
prefix in ``[artifacts] boot_network_prefixes`` says so: through the Flask
blueprint, with the client address a real connection would have."""

import pytest

from tests.conftest import machine_body

MAC = "52:54:00:00:00:07"


@pytest.fixture
def prefixes():
    return []


@pytest.fixture
def conf(conf, prefixes, tmp_path):
    leases = tmp_path / "dnsmasq.leases"
    # a lease file that names loopback for the machine's MAC (a test rig's, say)
    leases.write_text(f"0 {MAC} 127.0.0.1 host7 *\n")
    conf.set_override("boot_network_prefixes", prefixes, group="artifacts")
    conf.set_override("lease_file", str(leases), group="dnsmasq")
    return conf


def evidence_kind(app, api, address):
    r = app.test_client().get(f"/boot/mac/{MAC}/fake/boot.ipxe",
                              environ_base={"REMOTE_ADDR": address})
    assert r.status_code == 200  # served in any case
    [machine] = api.get("/v1/machines").json["machines"]
    last = api.get(f"/v1/machines/{machine['id']}/evidence").json["evidence"][-1]
    assert last["client_address"] == address
    return last["kind"]


@pytest.mark.parametrize("prefixes, address, kind", [
    ([], "127.0.0.1", "unverified"),
    ([], "::1", "unverified"),
    (["0.0.0.0/0", "::/0"], "127.0.0.1", "unverified"),   # a catch-all is no loopback prefix
    (["0.0.0.0/0", "::/0"], "::1", "unverified"),
    (["0.0.0.0/0", "::/0"], "::ffff:127.0.0.1", "unverified"),
    (["0.0.0.0/0", "::/0"], "198.51.100.7", "fetch"),
    (["127.0.0.0/8", "::1/128"], "127.0.0.1", "fetch"),
    (["127.0.0.0/8", "::1/128"], "::1", "fetch"),
    (["127.0.0.0/8", "::1/128"], "::ffff:127.0.0.5", "fetch"),
    (["p2=127.0.0.0/8"], "127.0.0.1", "unverified"),      # another partition's
])
def test_loopback_is_bound_only_by_a_loopback_prefix(app, api, partition, prefixes, address,
                                                     kind):
    """The machine's NIC is even registered with the loopback addresses, and
    dnsmasq's lease file names 127.0.0.1 for its MAC: neither binds."""
    body = machine_body(7, nics=[{"mac": MAC, "ipv4_address": "127.0.0.1",
                                  "ipv6_address": "::1"}])
    assert api.post("/v1/machines", json=body).status_code == 201
    assert evidence_kind(app, api, address) == kind
