"""The boot agent's replica: tokens answered from the data (a generation the
data does not hold has none), the by-MAC index following changes, and
``[agent] listen``."""

import time

import pytest

from metalboot_framework.agent.process import parse_listen
from metalboot_framework.agent.replica import Replica, ReplicaTokens
from metalboot_framework.exceptions import Unauthorized
from metalboot_framework.services import BootServices


def _machine(n, interface="fake", booting_to=(), generation=1):
    mid = f"00000000-0000-4000-8000-{n:012x}"
    return {"id": mid, "partition_id": "p1", "boot_interface": interface,
            "boot_mode": "uefi", "state": "ready", "properties": {},
            "token_generation": generation, "prepared_interface": None,
            "nics": [{"mac": f"52:54:00:00:00:{n:02x}", "duid": None,
                      "ipv4_address": None, "ipv6_address": None}],
            "booting_to": list(booting_to),
            "tokens": {"fake": [f"tok-{n}-{generation}", f"unb-{n}-{generation}"],
                       "fake-alt": [f"alt-{n}-{generation}", f"altu-{n}-{generation}"]}}


PARTITION = {"id": "p1", "kernel_url": None, "initrd_url": None, "cmdline": "console=ttyS0",
             "metal_boot_url": None, "metal_hammer_version": None, "properties": {},
             "boot_url": "http://[fd00::b007]:6481"}


@pytest.fixture
def replica(conf, tmp_path):
    conf.set_override("enabled_boot_interfaces", ["fake", "fake-alt"])
    interfaces, hooks = BootServices.load_plugins(conf)
    services = BootServices(conf, interfaces, hooks, ReplicaTokens())
    replica = Replica(services, None, ["p1"], str(tmp_path / "agent"), 900)
    replica.load(replica.partitions["p1"],
                 {"partition": PARTITION, "interfaces": ["fake", "fake-alt"], "cursor": 7,
                  "machines": [_machine(1), _machine(2)]}, "api")
    replica.partitions["p1"].contact = time.time()  # as the API's answer sets it
    yield replica
    replica.shutdown()


def test_tokens_come_from_the_data(replica):
    tokens = replica.tokens
    mid = _machine(1)["id"]
    assert tokens.machine_token(mid, 1, "fake") == "tok-1-1"
    assert tokens.unbound_token(mid, 1, "fake-alt") == "altu-1-1"
    assert tokens.classify(mid, 1, "fake", "tok-1-1") is True
    assert tokens.classify(mid, 1, "fake", "unb-1-1") is False
    assert tokens.classify(mid, 1, "fake", "tok-2-1") is None  # another machine's
    assert tokens.classify(mid, 1, "fake-alt", "tok-1-1") is None  # another interface's
    assert tokens.machine_token(mid, 2, "fake") is None  # a generation the data lacks
    assert tokens.classify(mid, 2, "fake", "tok-1-1") is None
    assert not tokens.verify(mid, 1, "fake", "")
    # a boot report's token: which interfaces it is the machine's own for
    assert replica.authenticate_report(mid, "tok-1-1") == {"fake": True}
    assert replica.authenticate_report(mid, "unb-1-1") == {"fake": False}
    with pytest.raises(Unauthorized):
        replica.authenticate_report(mid, "tok-2-1")


def test_changes_replace_records_and_the_mac_index(replica):
    data = replica.partitions["p1"]
    m1, m2 = _machine(1)["id"], _machine(2)["id"]
    assert replica.macs.cached(("52:54:00:00:00:01", "fake")) == m1
    assert replica.macs.cached(("52:54:00:00:00:01", "fake-alt")) is None
    # a migration to fake-alt boots m1; m2's tokens were rotated; the partition changed
    replica.apply(data, {"cursor": 9, "partition": dict(PARTITION, cmdline="quiet"),
                         "machines": [_machine(1, booting_to=["fake-alt"]),
                                      _machine(2, generation=2)], "removed": []})
    assert replica.macs.cached(("52:54:00:00:00:01", "fake-alt")) == m1
    assert replica.macs.cached(("52:54:00:00:00:01", "fake")) == m1
    assert replica.snapshots.cached(m1).partition.cmdline == "quiet"
    assert replica.snapshots.cached(m1).partition.boot_url == PARTITION["boot_url"]
    assert replica.tokens.machine_token(m2, 1, "fake") is None
    assert replica.tokens.machine_token(m2, 2, "fake") == "tok-2-2"
    replica.apply(data, {"cursor": 10, "partition": None, "machines": [],
                         "removed": [m2]})
    assert replica.snapshots.cached(m2) is None
    assert replica.macs.cached(("52:54:00:00:00:02", "fake")) is None
    assert data.cursor == 10 and set(data.machines) == {m1}


@pytest.mark.parametrize("listen, expected", [
    ("[::]:6481", ("::", 6481)), ("[fd00:b007::1]:80", ("fd00:b007::1", 80)),
    ("0.0.0.0:6481", ("0.0.0.0", 6481)), ("boot.example:1", ("boot.example", 1))])
def test_listen(listen, expected):
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["::1:6481", "[::1]", "6481", "[::1]:0", "[::1:80"])
def test_bad_listen_names_the_option(listen):
    with pytest.raises(ValueError, match=r"\[agent\] listen"):
        parse_listen(listen)
