"""Several conductors and an API process sharing a real PostgreSQL database."""

import signal
import time

import pytest

from metalboot_framework.testing.simulator import FETCH, SILENT, SimulatedFleet
from tests.functional.test_migrations import (all_events, machine_states, migrate,
                                              moves_by_machine, setup_machines, wait_for)

pytestmark = pytest.mark.functional

# Ten workers each against a max_parallel of 20: conductors share a migration by
# their capacity (a machine's coroutine keeps its lock to the end and refills
# the slot it frees), so with more workers than max_parallel the first to start
# the wave could run all of it, and killing the other would test nothing.
CONDUCTOR_CONF = """enabled_boot_interfaces = fake,fake-alt
host = {host}
[conductor]
workers = 10
heartbeat_interval = 1
heartbeat_timeout = 4
[api]
public_url = {public_url}
"""


def test_two_conductors_one_killed(server_factory, postgres):
    url = postgres.create_database()
    api = server_factory(command="metalboot_framework.cmd.api", database_url=url,
                         extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()
    conductors = {
        name: server_factory(command="metalboot_framework.cmd.conductor", database_url=url,
                             extra_conf=CONDUCTOR_CONF.format(host=name, public_url=api.url)
                             ).start(wait=False)
        for name in ("conductor-a", "conductor-b")}
    ids = setup_machines(api, 120, properties={"fake_delay": 0.05})
    silent = set(ids[::15])
    with SimulatedFleet(api.url, api.token, only_interfaces=["fake-alt"],
                        default=lambda mid, iface: SILENT if mid in silent else FETCH):
        m = migrate(api, ids, max_parallel=20, boot_timeout=4)
        deadline = time.monotonic() + 60
        while api.request("GET", f"/v1/migrations/{m['id']}").json()["counts"].get(
                "done", 0) < 30:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # both conductors took part before one dies
        conductors["conductor-a"].stop(sig=signal.SIGKILL)
        final = wait_for(api, m["id"], timeout=180)
    assert final["state"] == "done", final
    assert set(final["counts"]) <= {"done", "rolled_back"}, final["counts"]
    per = machine_states(api, m["id"])
    assert {mid for mid in ids if per[mid]["state"] == "rolled_back"} >= silent
    steps = moves_by_machine(all_events(api, migration_id=m["id"]))
    for mid in ids:
        transitions = steps.get(mid, [])
        # each transition once: no step was carried out twice in one attempt
        assert len(transitions) == len(set(transitions)), (mid, transitions)
        machine = api.request("GET", f"/v1/machines/{mid}").json()
        assert machine["lock"] is None and machine["state"] == "ready"
        assert machine["boot_interface"] == ("fake-alt" if per[mid]["state"] == "done"
                                             else "fake")
    log_a = conductors["conductor-a"].log()
    log_b = conductors["conductor-b"].log()
    assert "conductor-a" in log_b or "missed heartbeats" in log_b
    # every machine's start is in its history (the record that survives a SIGKILL) ...
    assert all(("queued", "validating") in steps[mid] for mid in ids)
    # ... and in the step logs, but for the starts conductor-a committed in its last
    # tick and was killed before logging: a tick starts at most max_parallel (20)
    assert log_a.count("-> validating") + log_b.count("-> validating") >= len(ids) - 20
    assert log_a.count("in migration") > 0 and log_b.count("in migration") > 0
