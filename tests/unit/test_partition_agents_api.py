"""What a partition's boot agents may read and deliver, with their
partition-scoped tokens: /v1/partitions/{id}/agent-tokens and .../boot-data."""

import pytest

from tests.conftest import ApiClient, machine_body

MID = machine_body(1)["id"]
OTHER_MID = machine_body(2, partition="p2")["id"]


@pytest.fixture
def two_partitions(api, partition):
    assert api.post("/v1/partitions", json={"id": "p2"}).status_code == 201
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    assert api.post("/v1/machines", json=machine_body(2, partition="p2")).status_code == 201


def agent_client(app, api, partition_id="p1"):
    r = api.post(f"/v1/partitions/{partition_id}/agent-tokens", json={"description": "rack 1"})
    assert r.status_code == 201, r.json
    return ApiClient(app.test_client(), token=r.json["token"]), r.json


def record(seq, machine_id=MID, kind="fetch"):
    return {"seq": seq, "machine_id": machine_id, "interface": "fake", "kind": kind,
            "path": "boot.ipxe", "client_address": "2001:db8::5", "data": None,
            "created_at": "2026-12-05T15:00:00Z"}


def test_agent_token_reads_its_partition_only(app, api, two_partitions):
    agent, made = agent_client(app, api)
    assert made["token"].startswith("mbat_") and made["partition"] == "p1"
    data = agent.get("/v1/partitions/p1/boot-data")
    assert data.status_code == 200, data.json
    [machine] = data.json["machines"]
    assert machine["id"] == MID and machine["nics"][0]["mac"] == "52:54:00:00:00:01"
    # tokens for every enabled interface, as the API's signer makes them
    assert set(machine["tokens"]) == set(data.json["interfaces"])
    assert "bmc" not in machine and "password" not in str(data.json)
    # another partition's data, and every other endpoint: 403
    other = agent.get("/v1/partitions/p2/boot-data")
    assert other.status_code == 403 and "p1" in other.json["error"]["message"]
    for url in ("/v1/machines", "/v1/partitions", f"/v1/machines/{MID}", "/v1/events",
                "/v1/partitions/p1", "/metrics"):
        assert agent.get(url).status_code == 403, url
    assert agent.post("/v1/partitions/p1/agent-tokens", json={}).status_code == 403
    assert agent.patch("/v1/partitions/p1", json={"description": "x"}).status_code == 403
    # the admin may read it too; a reader may not
    assert api.get("/v1/partitions/p1/boot-data").status_code == 200
    reader = ApiClient(app.test_client(), token="reader-token-for-tests")
    assert reader.get("/v1/partitions/p1/boot-data").status_code == 403


def test_tokens_are_listed_revoked_and_rotated_without_restart(app, api, two_partitions):
    agent, made = agent_client(app, api)
    listed = api.get("/v1/partitions/p1/agent-tokens").json["agent_tokens"]
    assert [t["id"] for t in listed] == [made["id"]] and "token" not in listed[0]
    assert agent.get("/v1/partitions/p1/boot-data").status_code == 200
    # rotation with a grace period: both work, the new one is listed too
    rotated = api.post(f"/v1/partitions/p1/agent-tokens/{made['id']}/rotate?grace=60")
    assert rotated.status_code == 201 and rotated.json["replaces"] == made["id"]
    new = ApiClient(app.test_client(), token=rotated.json["token"])
    assert new.get("/v1/partitions/p1/boot-data").status_code == 200
    assert agent.get("/v1/partitions/p1/boot-data").status_code == 200
    # rotation without grace ends the old token at once
    again = api.post(f"/v1/partitions/p1/agent-tokens/{rotated.json['id']}/rotate?grace=0")
    assert new.get("/v1/partitions/p1/boot-data").status_code == 401
    # revocation
    assert api.delete(f"/v1/partitions/p1/agent-tokens/{made['id']}").status_code == 204
    assert agent.get("/v1/partitions/p1/boot-data").status_code == 401
    assert [t["id"] for t in api.get("/v1/partitions/p1/agent-tokens").json["agent_tokens"]] \
        == [again.json["id"]]
    assert api.delete(f"/v1/partitions/p2/agent-tokens/{again.json['id']}").status_code == 404
    assert api.post("/v1/partitions/nope/agent-tokens", json={}).status_code == 404
    bad = api.post(f"/v1/partitions/p1/agent-tokens/{again.json['id']}/rotate?grace=-1")
    assert bad.status_code == 422 and "grace" in bad.json["error"]["fields"]


def test_change_feed_follows_every_change(app, api, two_partitions):
    agent, _ = agent_client(app, api)
    cursor = agent.get("/v1/partitions/p1/boot-data").json["cursor"]
    nothing = agent.get(f"/v1/partitions/p1/boot-data/changes?since={cursor}")
    assert nothing.json == {"cursor": cursor, "partition": None, "machines": [],
                            "removed": [], "more": False}
    # a partition change and a new machine
    assert api.patch("/v1/partitions/p1", json={"boot": {"cmdline": "console=ttyS1"}}) \
        .status_code == 200
    assert api.post("/v1/machines", json=machine_body(3)).status_code == 201
    # a change in p2 is not p1's
    assert api.patch("/v1/partitions/p2", json={"boot": {"cmdline": "quiet"}}).status_code == 200
    changed = agent.get(f"/v1/partitions/p1/boot-data/changes?since={cursor}&wait=1").json
    assert changed["partition"]["cmdline"] == "console=ttyS1"
    assert [m["id"] for m in changed["machines"]] == [machine_body(3)["id"]]
    assert changed["cursor"] > cursor
    # a NIC change, then a deletion
    cursor = changed["cursor"]
    r = api.patch(f"/v1/machines/{MID}", json={"nics": [{"mac": "52:54:00:00:00:99"}]})
    assert r.status_code == 200, r.json
    changed = agent.get(f"/v1/partitions/p1/boot-data/changes?since={cursor}").json
    assert [n["mac"] for n in changed["machines"][0]["nics"]] == ["52:54:00:00:00:99"]
    cursor = changed["cursor"]
    assert api.delete(f"/v1/machines/{MID}?force=true").status_code in (202, 204)
    changed = agent.get(f"/v1/partitions/p1/boot-data/changes?since={cursor}").json
    assert changed["removed"] == [MID] and changed["machines"] == []
    # a cursor from the future (a restored database): 410, take a snapshot
    gone = agent.get("/v1/partitions/p1/boot-data/changes?since=999999")
    assert gone.status_code == 410
    bad = agent.get("/v1/partitions/p1/boot-data/changes")
    assert bad.status_code == 422 and "since" in bad.json["error"]["fields"]


def test_evidence_is_stored_once_and_only_for_the_partition(app, api, two_partitions):
    agent, _ = agent_client(app, api)
    body = {"agent": "agent-a", "journal": "j1", "records": [record(1), record(2, kind="report"),
                                            record(3, machine_id=OTHER_MID)]}
    first = agent.post("/v1/partitions/p1/boot-data/evidence", json=body)
    assert first.status_code == 200, first.json
    assert first.json == {"stored": 2, "duplicates": 0, "refused": 1}
    again = agent.post("/v1/partitions/p1/boot-data/evidence", json=body)
    assert again.json == {"stored": 0, "duplicates": 2, "refused": 1}
    # another agent's seq 1 is another record
    other = agent.post("/v1/partitions/p1/boot-data/evidence",
                       json={"agent": "agent-b", "journal": "j1", "records": [record(1)]})
    assert other.json["stored"] == 1
    # the same agent id with a journal begun anew (a rebuilt host): its seq 1 is new
    rebuilt = agent.post("/v1/partitions/p1/boot-data/evidence",
                         json={"agent": "agent-a", "journal": "j2", "records": [record(1)]})
    assert rebuilt.json == {"stored": 1, "duplicates": 0, "refused": 0}
    evidence = api.get(f"/v1/machines/{MID}/evidence").json["evidence"]
    assert sorted(e["kind"] for e in evidence) == ["fetch", "fetch", "fetch", "report"]
    assert all(e["client_address"] == "2001:db8::5" for e in evidence)
    assert api.get(f"/v1/machines/{OTHER_MID}/evidence").json["evidence"] == []
    # bad input names the field
    bad = agent.post("/v1/partitions/p1/boot-data/evidence",
                     json={"agent": "a b", "journal": "j1", "records": [record(1)]})
    assert bad.status_code == 422 and "agent" in bad.json["error"]["fields"]
    bad = agent.post("/v1/partitions/p1/boot-data/evidence",
                     json={"agent": "a", "journal": "j1",
                           "records": [dict(record(1), kind="guess")]})
    assert bad.status_code == 422 and "records.0.kind" in bad.json["error"]["fields"]
    bad = agent.post("/v1/partitions/p1/boot-data/evidence",
                     json={"agent": "a", "records": [record(1)]})
    assert bad.status_code == 422 and "journal" in bad.json["error"]["fields"]
    assert agent.post("/v1/partitions/p2/boot-data/evidence", json=body).status_code == 403


def test_partition_boot_url_moves_every_url_of_its_machines(app, api, two_partitions):
    r = api.patch("/v1/partitions/p1", json={"boot": {"boot_url": "http://[2001:db8::b]:6481"}})
    assert r.status_code == 200 and r.json["boot"]["boot_url"] == "http://[2001:db8::b]:6481"
    services = app.extensions["metalboot"]
    task = services.task(MID, "fake")
    assert task.artifact_url("boot.ipxe").startswith("http://[2001:db8::b]:6481/boot/")
    assert "METAL_BOOT_REPORT_URL=http://[2001:db8::b]:6481/v1/machines/" in task.boot_script()
    # a machine of another partition keeps the API's public URL
    assert services.task(OTHER_MID, "fake").artifact_url("boot.ipxe") \
        .startswith(services.public_url)


def test_a_lease_that_bound_a_fetch_is_delivered_with_it(app, api, two_partitions):
    """An agent's fetch bound by its own DHCP server's lease: the lease comes
    with the record, is stored, and the evidence list shows it."""
    agent, _ = agent_client(app, api)
    lease = {"address": "fd55::1007", "mac": "52:54:00:00:00:01", "expires": 1796472000,
             "server": "Kea"}
    bound = dict(record(1), client_address="fd55::1007",
                 data={"by_mac": "dhcp-lease", "lease": lease})
    r = agent.post("/v1/partitions/p1/boot-data/evidence", json={
        "agent": "agent-a", "journal": "j1", "records": [bound]})
    assert r.status_code == 200 and r.json["stored"] == 1, r.json
    [stored] = api.get(f"/v1/machines/{MID}/evidence").json["evidence"]
    assert (stored["binding"], stored["lease"]) == ("dhcp-lease", lease)
    # a lease that is not one is refused, naming the field
    bad = dict(bound, seq=2, data={"by_mac": "dhcp-lease",
                                   "lease": dict(lease, expires=1.5, mac="not-a-mac")})
    r = agent.post("/v1/partitions/p1/boot-data/evidence", json={
        "agent": "agent-a", "journal": "j1", "records": [bad]})
    assert r.status_code == 422
    assert {"records.0.data.lease.expires", "records.0.data.lease.mac"} <= set(
        r.json["error"]["fields"]), r.json
