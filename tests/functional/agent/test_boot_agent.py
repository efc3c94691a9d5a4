"""metalboot-boot-agent against a real metalboot-server on loopback: it serves
what the API registers and follows its changes within a second, a whole
migration boots through it, it keeps serving and journaling while the API is
away and delivers everything once when it returns, loses nothing to SIGKILL,
serves a young snapshot after a restart without the API but not an old one,
and refuses a configuration with a database."""

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import requests

from benchmarks.common import partition_iso
from tests.conftest import free_port, machine_body, signer_of
from tests.functional.agent.agent_process import (
    AGENT, INTERFACES, AgentProcess, agent_url, evidence, setup_partition)
from tests.functional.test_migrations import migrate, wait_for

pytestmark = pytest.mark.functional

ISO_IFACE = "redfish-virtual-media-ipxe"
IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")


@pytest.fixture
def world(server_factory, tmp_path):
    """start(count, ...) -> (metalboot-server, machine ids, agent token, agent)."""
    agents = []

    def start(count=3, properties=None, enrolled=False, agent_extra="", server_extra="",
              interfaces=INTERFACES):
        api = server_factory(extra_conf=f"enabled_boot_interfaces = {interfaces}\n"
                                        f"{server_extra}").start()
        port = free_port()
        ids, token = setup_partition(api, count, agent_url(port), properties=properties,
                                     enrolled=enrolled)
        agent = AgentProcess(tmp_path / "agent", api.url, token, port=port,
                             extra=agent_extra, interfaces=interfaces)
        agents.append(agent)
        return api, ids, token, agent

    yield start
    for agent in agents:
        agent.stop()


def _script_path(signer, machine_id, interface="fake"):
    return f"/boot/{machine_id}/{interface}/" \
           f"{signer.machine_token(machine_id, 1, interface)}/boot.ipxe"


def test_serves_what_the_api_registered_and_follows_a_change_within_a_second(world):
    api, ids, _, agent = world(3)
    agent.start()
    signer = signer_of(api)
    path = _script_path(signer, ids[0])
    served, central = agent.get(path), requests.get(api.url + path, timeout=30)
    assert served.status_code == 200, served.text
    assert served.content == central.content  # one implementation of the answers
    assert f"{agent.url}/v1/machines/{ids[0]}/boot-report" in served.text  # boot_url
    assert "console=ttyS0" in served.text
    wrong = agent.get(path.replace(signer.machine_token(ids[0], 1, "fake"), "0" * 32))
    assert (wrong.status_code, wrong.json()["error"]["message"]) == \
        (404, "no such boot artifact")
    by_mac = agent.get("/boot/mac/52-54-00-00-00-02/fake/boot.ipxe")
    assert by_mac.status_code == 200 and f"for machine {ids[1]}," in by_mac.text
    assert agent.get("/boot/mac/52-54-00-00-00-02/fake-alt/boot.ipxe").status_code == 404

    # a change through the API is served within a second
    r = api.request("PATCH", "/v1/partitions/p1", json={"boot": {"cmdline": "console=ttyS1"}})
    assert r.status_code == 200, r.text
    changed = time.monotonic()
    while "console=ttyS1" not in agent.get(path).text:
        assert time.monotonic() - changed < 1.0, "the change was not served within 1 s"
        time.sleep(0.01)

    # a machine registered while the agent runs is served as soon
    r = api.request("POST", "/v1/machines", json=[machine_body(9)])
    assert r.status_code == 201, r.text
    registered, new = time.monotonic(), _script_path(signer, machine_body(9)["id"])
    while agent.get(new).status_code != 200:
        assert time.monotonic() - registered < 1.0, "not served within 1 s"
        time.sleep(0.01)

    report = requests.post(f"{agent.url}/v1/machines/{ids[0]}/boot-report",
                           json={"boot_interface": "fake", "message": "up"}, timeout=30,
                           headers={"Authorization":
                                    f"Bearer {signer.machine_token(ids[0], 1, 'fake')}"})
    assert report.status_code == 201, report.text
    assert report.json()["machine_id"] == ids[0]
    assert isinstance(report.json()["evidence_id"], int)  # the journal's sequence number
    bad = requests.post(f"{agent.url}/v1/machines/{ids[0]}/boot-report",
                        json={"boot_interface": "fake"}, timeout=30,
                        headers={"Authorization": f"Bearer {'0' * 32}"})
    assert bad.status_code == 401

    health = agent.wait_delivered()
    assert health["fresh"] is True and health["age"] < 30
    assert [p["id"] for p in health["partitions"]] == ["p1"]
    rows = evidence(api, ids[0])
    # the fetches through the agent (the API's own fetch too), and the report
    assert [(e["kind"], e["path"]) for e in rows].count(("fetch", "boot.ipxe")) >= 3
    assert [(e["kind"], e["interface"], e["path"]) for e in rows][-1] == \
        ("report", "fake", "boot-report")
    assert [(e["kind"], e["client_address"]) for e in evidence(api, ids[1])] == \
        [("fetch", "::1")]  # by MAC, from the loopback the tests' prefixes bind


def test_migration_through_the_agent_ends_done_with_its_evidence(world):
    api, ids, _, agent = world(6, properties={"fake_autoboot": True}, enrolled=True)
    agent.start()
    migration = migrate(api, ids, max_parallel=3)["id"]
    m = wait_for(api, migration, timeout=90)
    assert m["state"] == "done", (m, agent.log()[-3000:])
    machines = api.request("GET", f"/v1/migrations/{migration}/machines").json()["machines"]
    assert {x["state"] for x in machines} == {"done"}
    assert all(x["evidence"]["interface"] == "fake-alt" for x in machines)
    agent.wait_delivered()
    assert agent.stop() == 0
    # every machine fetched through the agent, and its journal delivered that
    delivered = [line for line in agent.log().splitlines() if "evidence delivered:" in line]
    assert delivered and f"{len(ids)} stored" in delivered[-1], delivered
    for machine_id in ids:
        fetches = [e for e in evidence(api, machine_id) if e["interface"] == "fake-alt"]
        assert [(e["kind"], e["path"]) for e in fetches] == [("fetch", "boot.ipxe")]


def test_partition_iso_fetched_once_checked_and_served_in_ranges(world):
    iso_conf = f"[redfish]\nipxe_efi_path = {IPXE_EFI}\n"
    api, _, _, agent = world(1, server_extra=iso_conf, agent_extra=iso_conf,
                             interfaces=f"{INTERFACES},{ISO_IFACE}")
    agent.start()
    url, path = partition_iso(api, "p1", ISO_IFACE)
    iso = "/boot/" + url.split("/boot/", 1)[1]
    with open(path, "rb") as f:
        data = f.read()
    step = 256 * 1024
    parts = []
    for offset in range(0, len(data), step):
        r = agent.get(iso, headers={"Range": f"bytes={offset}-{offset + step - 1}"})
        assert r.status_code == 206, r.text
        parts.append(r.content)
    assert b"".join(parts) == data
    assert agent.log().count("fetched from the API") == 1
    cached = agent.state_dir / "artifacts" / "p1" / ISO_IFACE / iso.rsplit("/", 1)[1]
    assert cached.read_bytes() == data
    assert agent.get(iso.rsplit("/", 1)[0] + "/other.iso").status_code == 404
    central = requests.head(api.url + iso, timeout=30)
    assert api.stop() == 0  # cached: served without the API
    whole = agent.get(iso)
    assert (whole.status_code, whole.content) == (200, data)
    assert whole.headers["Content-Type"] == central.headers["Content-Type"]


def _fetch_all(agent, paths):
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda p: agent.get(p).status_code, paths))


def test_api_away_sigkill_and_restart_lose_nothing_and_store_once(world):
    api, ids, _, agent = world(10)
    agent.start()
    signer = signer_of(api)
    paths = [_script_path(signer, m) for m in ids]
    assert _fetch_all(agent, paths) == [200] * len(ids)
    agent.wait_delivered()
    agent.wait_saved()

    # the API goes away: the agent serves and journals
    assert api.stop() == 0
    assert _fetch_all(agent, paths * 3) == [200] * (3 * len(ids))
    health = agent.healthz()
    assert health.status_code == 200 and health.json()["journal_pending"] == 3 * len(ids)
    assert "delivery_error" in health.json()
    # SIGKILL right after answers: what was answered was journaled
    assert _fetch_all(agent, paths) == [200] * len(ids)
    agent.stop(signal.SIGKILL)

    # restarted while the API is away: the young snapshot on disk is served
    agent.start(fresh=True)
    assert agent.healthz().json()["partitions"][0]["source"] == "disk"
    assert agent.healthz().json()["journal_pending"] == 4 * len(ids)
    assert _fetch_all(agent, paths) == [200] * len(ids)
    journal = agent.state_dir / "journal" / "journal"
    saved = agent.directory / "journal-before-delivery"
    shutil.copy(journal, saved)

    # the API is back: everything is delivered, each fetch stored once
    api.start()
    agent.wait_delivered()
    for machine_id in ids:
        assert len(evidence(api, machine_id)) == 6, machine_id  # 1 + 3 + 1 + 1

    # delivered again (as after a crash before the delivered mark was written): stored once
    assert agent.stop() == 0
    shutil.copy(saved, journal)
    mark_path = agent.state_dir / "journal" / "delivered"
    mark = json.loads(mark_path.read_text())  # the same journal (its id), an older mark
    mark_path.write_text(json.dumps(dict(mark, seq=len(ids))))
    agent.start()
    agent.wait_delivered()
    assert agent.stop() == 0
    assert f"0 stored, {5 * len(ids)} duplicates" in agent.log()
    for machine_id in ids:
        assert len(evidence(api, machine_id)) == 6, machine_id


def test_two_agents_of_one_partition_each_delivered_once(world, tmp_path):
    """Two agents of one partition number their journals alike (1, 2, ...):
    the API keeps both, told apart by the agents' ids; one killed, the other
    serves on, and the killed one delivers what it answered when restarted."""
    api, ids, token, first = world(4)
    second = AgentProcess(tmp_path / "agent-b", api.url, token, agent_id="agent-b")
    first.start()
    second.start()
    try:
        signer = signer_of(api)
        paths = [_script_path(signer, m) for m in ids]
        assert _fetch_all(first, paths) == [200] * len(ids)
        first.stop(signal.SIGKILL)
        assert _fetch_all(second, paths * 2) == [200] * (2 * len(ids))
        second.wait_delivered()
        first.start()
        first.wait_delivered()
    finally:
        second.stop()
    for machine_id in ids:
        assert [(e["kind"], e["path"]) for e in evidence(api, machine_id)] == \
            [("fetch", "boot.ipxe")] * 3, machine_id


def test_one_agent_of_two_partitions_with_a_token_each(world, tmp_path):
    api, ids, token, _ = world(2)
    port = free_port()
    others, other_token = setup_partition(api, 2, agent_url(port), partition="p2", first=11)
    agent = AgentProcess(tmp_path / "agent-p1-p2", api.url, f"p1 {token}\np2 {other_token}",
                         port=port, partitions=("p1", "p2"))
    agent.start()
    try:
        signer = signer_of(api)
        assert _fetch_all(agent, [_script_path(signer, m) for m in ids + others]) == [200] * 4
        health = agent.wait_delivered()
        assert [(p["id"], p["machines"]) for p in health["partitions"]] == \
            [("p1", 2), ("p2", 2)]
    finally:
        agent.stop()
    for machine_id in ids + others:
        assert [e["kind"] for e in evidence(api, machine_id)] == ["fetch"], machine_id


def test_restart_without_the_api_and_an_old_snapshot_answers_503(world):
    api, ids, _, agent = world(2, agent_extra="[agent]\nmax_staleness = 2\n")
    agent.start()
    path = _script_path(signer_of(api), ids[0])
    assert agent.get(path).status_code == 200
    time.sleep(1.5)  # the snapshot (and the contact) is written within a second
    # the API away for longer than max_staleness: the running agent stops serving
    assert api.stop() == 0
    deadline = time.monotonic() + 10
    while agent.healthz().status_code == 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert agent.get(path).status_code == 503
    assert "max_staleness" in agent.healthz().json()["reason"]
    # restarted with only that old snapshot on disk: 503 with the reason
    assert agent.stop() == 0
    agent.start(fresh=False)
    health = agent.healthz()
    assert health.status_code == 503
    assert health.json()["fresh"] is False and "on disk" in health.json()["reason"]
    assert "max_staleness" in health.json()["reason"]
    refused = agent.get(path)
    assert refused.status_code == 503
    assert "partition p1" in refused.json()["error"]["message"]
    assert refused.headers["Retry-After"] == "5"
    # the API back: fresh again, and served
    api.start()
    deadline = time.monotonic() + 30
    while agent.healthz().status_code != 200:
        assert time.monotonic() < deadline, agent.log()
        time.sleep(0.1)
    assert agent.get(path).status_code == 200


def test_a_database_connection_is_refused_naming_the_option(tmp_path):
    agent = AgentProcess(tmp_path / "agent", "http://127.0.0.1:9", "token",
                         extra="[database]\nconnection = sqlite:////nonexistent.sqlite\n")
    done = subprocess.run([AGENT, "--config-file", str(agent.conf_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "[database] connection" in lines[0], done.stderr
