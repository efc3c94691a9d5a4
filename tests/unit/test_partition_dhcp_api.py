"""DHCP entries at the partition: published by the DHCP interfaces, carried in
the boot data, applied by agents that report their cursor, waited for by the
prepare step (``/v1/partitions/{id}/boot-data/dhcp``, ``.../dhcp-agents``)."""

import asyncio
import datetime

import pytest

from metalboot_framework import partition_dhcp
from metalboot_framework.dhcp import DhcpOption, HostEntry, Match
from metalboot_framework.store import models
from tests.conftest import ApiClient, machine_body
from tests.unit.test_partition_agents_api import MID, agent_client

ENTRY = HostEntry(mac="52:54:00:00:00:01", duid="00:03:00:01:52:54:00:00:00:01",
                  options=(DhcpOption(59, "http://boot.p1.example/x/ipxe.efi", version=6),
                           DhcpOption(16, "00000157000A48545450436C69656E74", version=6,
                                      hex=True, always_send=True),
                           DhcpOption(67, "snponly.efi", when={Match.NOT_IPXE})))


@pytest.fixture
def machines(api, partition):
    assert api.post("/v1/partitions", json={"id": "p2"}).status_code == 201
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    assert api.post("/v1/machines", json=machine_body(2, partition="p2")).status_code == 201


def report(agent, cursor, error=None, partition="p1", name="agent-a"):
    return agent.post(f"/v1/partitions/{partition}/boot-data/dhcp", json={
        "agent": name, "cursor": cursor, "interfaces": ["pxe"], "entries": 1,
        "error": error})


def test_entry_round_trips_as_json():
    assert HostEntry.from_dict(ENTRY.to_dict()) == ENTRY


def test_published_entries_travel_with_the_boot_data(app, api, services, machines):
    agent, _ = agent_client(app, api)
    start = agent.get("/v1/partitions/p1/boot-data").json
    assert start["machines"][0]["dhcp"] == {}
    position = partition_dhcp.publish(services, MID, "pxe", [ENTRY])
    assert position > start["cursor"]
    changes = agent.get(f"/v1/partitions/p1/boot-data/changes?since={start['cursor']}").json
    [machine] = changes["machines"]
    assert changes["cursor"] == position
    assert [HostEntry.from_dict(e) for e in machine["dhcp"]["pxe"]] == [ENTRY]
    # the other partition's agents hear nothing of it
    other, _ = agent_client(app, api, "p2")
    assert other.get("/v1/partitions/p2/boot-data").json["machines"][0]["dhcp"] == {}
    # withdrawn: a change again, without the entries
    removed = partition_dhcp.withdraw(services, MID, "pxe")
    changes = agent.get(f"/v1/partitions/p1/boot-data/changes?since={position}").json
    assert changes["cursor"] == removed and changes["machines"][0]["dhcp"] == {}
    # a deleted machine's entries go with it (the agents see it removed)
    partition_dhcp.publish(services, MID, "pxe", [ENTRY])
    assert api.delete(f"/v1/machines/{MID}?force=true").status_code in (202, 204)


def test_agents_report_what_they_applied(app, api, services, machines):
    agent, _ = agent_client(app, api)
    position = partition_dhcp.publish(services, MID, "pxe", [ENTRY])
    r = report(agent, position - 1, error="Kea refused the configuration")
    assert r.status_code == 200, r.json
    [listed] = api.get("/v1/partitions/p1/dhcp-agents").json["agents"]
    assert listed["agent"] == "agent-a" and listed["cursor"] == position - 1
    assert listed["fresh"] is True and listed["error"] == "Kea refused the configuration"
    assert api.get("/v1/partitions/p1/dhcp-agents").json["cursor"] == position
    # reported again: one row, updated
    assert report(agent, position).status_code == 200
    [listed] = api.get("/v1/partitions/p1/dhcp-agents").json["agents"]
    assert listed["cursor"] == position and listed["error"] is None
    # a cursor newer than the feed: the database was replaced; the agent starts over
    assert report(agent, position + 1000).status_code == 410
    # bad input names the field; other partitions and readers are refused
    bad = agent.post("/v1/partitions/p1/boot-data/dhcp", json={
        "agent": "a b", "cursor": -1, "interfaces": [], "entries": 0})
    assert bad.status_code == 422
    assert {"agent", "cursor"} <= set(bad.json["error"]["fields"])
    assert report(agent, 0, partition="p2").status_code == 403
    reader = ApiClient(app.test_client(), token="reader-token-for-tests")
    assert report(reader, 0).status_code == 403
    assert reader.get("/v1/partitions/p1/dhcp-agents").status_code == 200
    assert api.get("/v1/partitions/nope/dhcp-agents").status_code == 404


def test_prepare_waits_for_every_fresh_agent(app, api, services, machines):
    services.conf.set_override("apply_timeout", 1.0, group="dhcp")
    agent, _ = agent_client(app, api)
    position = partition_dhcp.publish(services, MID, "pxe", [ENTRY])

    def wait():
        return asyncio.run(partition_dhcp.wait_applied(services, MID, "p1", "pxe", position))

    # no agent at all: nothing would answer the machine
    with pytest.raises(partition_dhcp.DhcpNotApplied, match="no boot agent of partition p1"):
        wait()
    # a removal needs none: an agent that comes back reads it before it is fresh
    assert asyncio.run(partition_dhcp.wait_applied(services, MID, "p1", "pxe", position,
                                                   action="removed")) == []
    report(agent, position, name="agent-a")
    report(agent, position - 1, name="agent-b", error="Kea control socket not reachable")
    with pytest.raises(partition_dhcp.DhcpNotApplied) as caught:
        wait()
    assert "agent-b" in caught.value.message and "agent-a" not in caught.value.message
    assert "Kea control socket not reachable" in caught.value.message
    report(agent, position, name="agent-b")
    assert wait() == ["agent-a", "agent-b"]
    # an agent that stopped reporting is not waited for
    later = partition_dhcp.publish(services, MID, "pxe", [ENTRY])
    with services.db.write_conn() as conn:  # agent-b last reported a minute ago
        conn.execute(models.DhcpAgent.__table__.update()
                     .where(models.DhcpAgent.agent_id == "agent-b")
                     .values(reported_at=models.utcnow() - datetime.timedelta(seconds=60)))
    report(agent, later, name="agent-a")
    assert asyncio.run(partition_dhcp.wait_applied(services, MID, "p1", "pxe", later)) \
        == ["agent-a"]
