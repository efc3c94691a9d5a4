"""An upgrade as doc/deployment.rst describes it, on a real PostgreSQL server:
the schema brought up by metalboot-dbsync (the services do not upgrade it
themselves), then both conductors restarted one after the other -- SIGTERM,
as ``systemctl restart`` sends, and started again -- while a migration runs.
Every machine must end done, each step carried out once, none left locked."""

import collections
import subprocess
import sys
import time

import pytest

from metalboot_framework.testing.simulator import FETCH, SimulatedFleet
from tests.functional.test_migrations import (all_events, machine_states, migrate,
                                              moves_by_machine, setup_machines, wait_for)

pytestmark = pytest.mark.functional

# As in test_multi_conductor: fewer workers per conductor than max_parallel, so
# that both take part. The heartbeat timeout is far longer than the test: a
# stopped conductor's machines may go on only because it released them.
PROCESS_CONF = """enabled_boot_interfaces = fake,fake-alt
host = {host}
[conductor]
workers = 10
heartbeat_interval = 1
heartbeat_timeout = 600
{api}
[database]
auto_upgrade = false
"""
MACHINES = 300
MAX_PARALLEL = 20


def dbsync(server):
    """metalboot-dbsync with the services' configuration file."""
    out = subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.dbsync",
                          "--config-file", str(server.conf_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def done_count(api, migration_id):
    return api.request("GET", f"/v1/migrations/{migration_id}").json()["counts"].get("done", 0)


def wait_done_at_least(api, migration_id, count, timeout=90):
    deadline = time.monotonic() + timeout
    while (done := done_count(api, migration_id)) < count:
        assert time.monotonic() < deadline, f"only {done} machines done after {timeout} s"
        time.sleep(0.05)
    return done


def wait_running_again(conductor, timeout=60):
    deadline = time.monotonic() + timeout
    while conductor.log().count("metalboot-conductor running") < 2:
        assert conductor.proc.poll() is None, conductor.log()[-2000:]
        assert time.monotonic() < deadline, conductor.log()[-2000:]
        time.sleep(0.05)


def held_by(api, host):
    machines = api.request("GET", "/v1/machines", params={"limit": 1000}).json()["machines"]
    return [m["id"] for m in machines if (m["lock"] or {}).get("holder") == host]


def test_rolling_restart_of_conductors_during_a_migration(server_factory, postgres):
    url = postgres.create_database()
    api = server_factory(command="metalboot_framework.cmd.api", database_url=url,
                         extra_conf=PROCESS_CONF.format(host="api", api=""))
    # with [database] auto_upgrade = false no service touches the schema:
    # metalboot-dbsync creates it first
    assert "database at revision" in dbsync(api)
    api.start()
    conductors = {}
    for name in ("conductor-a", "conductor-b"):
        conf = PROCESS_CONF.format(host=name, api=f"[api]\npublic_url = {api.url}")
        conductors[name] = server_factory(command="metalboot_framework.cmd.conductor",
                                          database_url=url, extra_conf=conf).start(wait=False)
    ids = setup_machines(api, MACHINES, properties={"fake_delay": 0.2})
    restarts = []
    with SimulatedFleet(api.url, api.token, only_interfaces=["fake-alt"],
                        default=lambda mid, iface: FETCH):
        m = migrate(api, ids, max_parallel=MAX_PARALLEL, boot_timeout=60)
        target = MAX_PARALLEL
        for name in ("conductor-a", "conductor-b"):
            target = wait_done_at_least(api, m["id"], target) + MAX_PARALLEL
            # a new release's schema upgrade, on the live database (here: already
            # at the newest revision, so it changes nothing and says so)
            assert "database at revision" in dbsync(api)
            conductor = conductors[name]
            assert conductor.stop() == 0, conductor.log()  # SIGTERM: a clean stop
            # ... that handed its machines back: none is left locked by it, so
            # the other conductor goes on with them at once (a killed one would
            # hold them for heartbeat_timeout)
            assert held_by(api, name) == [], name
            state = api.request("GET", f"/v1/migrations/{m['id']}").json()
            restarts.append((name, state["state"], done_count(api, m["id"])))
            conductor.start(wait=False)
            # the next one stops only once this one runs again: never both down
            wait_running_again(conductor)
        final = wait_for(api, m["id"], timeout=180)
    # both restarts happened while the migration ran, with machines left to do
    assert [(name, state) for name, state, _ in restarts] == [
        ("conductor-a", "running"), ("conductor-b", "running")], restarts
    assert all(done < MACHINES for _, _, done in restarts), restarts
    assert final["state"] == "done", final
    assert final["counts"] == {"done": MACHINES}, final["counts"]
    per = machine_states(api, m["id"])
    assert {mid: per[mid]["state"] for mid in ids} == {mid: "done" for mid in ids}
    steps = collections.defaultdict(list, moves_by_machine(all_events(api, migration_id=m["id"])))
    for mid in ids:
        # each transition once: no step was carried out twice, none skipped
        assert len(steps[mid]) == len(set(steps[mid])), (mid, steps[mid])
        assert steps[mid][0] == ("queued", "validating") and steps[mid][-1][1] == "done", (
            mid, steps[mid])
    machines = api.request("GET", "/v1/machines", params={"limit": 1000}).json()["machines"]
    assert {(m_["boot_interface"], m_["state"], m_["lock"]) for m_ in machines} == {
        ("fake-alt", "ready", None)}
    for name, conductor in conductors.items():
        log = conductor.log()
        # stopped on SIGTERM and started again, and took part in the migration
        assert "received SIGTERM, shutting down" in log, log[-2000:]
        assert log.count("metalboot-conductor running") == 2, log[-2000:]
        assert "in migration" in log.split("received SIGTERM")[0], name
