"""The conductor's batch operations, one at a time in one thread: CPU per machine.

The migration benchmarks run 500 worker threads on two shared cores, and their
figures vary by tens of percent from run to run on a busy machine: a change
worth a few percent cannot be seen there. This one measures, on a SQLite database in a temporary
directory, the CPU (``time.process_time``, best of several rounds) of what
the scheduler and the group commit do for every machine of a migration:

- ``claim``: take the locks of 500 machines and read their steps and
  snapshots (:meth:`.jobs.Claims.claim_many`);
- ``apply``: one step's transition for 500 machines (:meth:`.moves.MoveWriter.apply_many`);
- ``events``: insert those transitions' events (:func:`insert_events`);
- ``announce``: log each transition and call the hooks;
- ``tick``: one scheduler tick with nothing to move (500 machines awaiting their
  boot, 9,500 queued, no idle worker), with and without the full evidence scan
  it makes every 2 s.

Run it before and after a change, on the same machine: ``python -m
benchmarks.conductor_ops``. The figures are what the work costs alone; in a
process with hundreds of threads the same work costs more.
"""

import argparse
import datetime
import logging
import os
import tempfile
import time

from benchmarks.common import fmt, table
from metalboot_framework import logs, machine_steps
from metalboot_framework.conductor import machine_lock
from metalboot_framework.conductor.manager import Conductor
from metalboot_framework.conductor.moves import Move
from metalboot_framework.conductor.steps import StepRunner
from metalboot_framework.services import Services
from metalboot_framework.store import models
from metalboot_framework.testing.conformance import make_conf
from metalboot_framework.transactions import UnitOfWork, insert_events

BATCH = 500


def fleet(services, count):
    """``count`` machines in one running migration: the first BATCH awaiting their
    boot, the others queued."""
    ids = [f"00000000-0000-4000-8000-{i:012x}" for i in range(count)]
    now = models.utcnow()
    with services.db.write_conn() as conn:
        conn.execute(models.Partition.__table__.insert(), {"id": "p1"})
        conn.execute(models.Machine.__table__.insert(), [
            {"id": m, "partition_id": "p1", "boot_interface": "fake",
             "state": "migrating" if i < BATCH else "ready", "properties": {"fake_delay": 0.2}}
            for i, m in enumerate(ids)])
        conn.execute(models.Nic.__table__.insert(), [
            {"machine_id": m, "position": 0,
             "mac": "52:54:00:%02x:%02x:%02x" % (i >> 16 & 255, i >> 8 & 255, i & 255)}
            for i, m in enumerate(ids)])
        conn.execute(models.Migration.__table__.insert(), {
            "id": "g", "state": "running", "target_boot_interface": "fake-alt",
            "selector": {}, "options": {"max_parallel": BATCH, "boot_timeout": 600},
            "total": count, "created_at": now})
        conn.execute(models.MigrationMachine.__table__.insert(), [
            {"migration_id": "g", "machine_id": m, "position": i, "canary": False,
             "source_boot_interface": "fake", "attempt": 1 if i < BATCH else 0,
             "state": "awaiting_boot" if i < BATCH else "queued",
             "activated_at": now if i < BATCH else None,
             "deadline": now + datetime.timedelta(seconds=600) if i < BATCH else None,
             "updated_at": now - datetime.timedelta(seconds=60)}
            for i, m in enumerate(ids)])
    return ids[:BATCH]


def measure(rounds, work):
    """Least CPU seconds of ``rounds`` calls of ``work()``, which returns the
    seconds it measured itself (or None: the whole call counts)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        own = work()
        best = min(best, own if own is not None else time.process_time() - started)
    return best


def run(count=10000, rounds=10):
    logging.basicConfig(level=logging.INFO, stream=open(os.devnull, "w"))  # noqa: SIM115
    for handler in logging.getLogger().handlers:
        logs.install(handler)  # as the server logs: request ids, secrets masked
    workdir = tempfile.mkdtemp(prefix="metalboot-bench-ops-")
    conf = make_conf(workdir, ["fake", "fake-alt"], options={"conductor": {"workers": BATCH}})
    services = Services.from_conf(conf, upgrade=True)
    batch = fleet(services, count)
    runner = StepRunner(services, "bench-host")
    mm = models.MigrationMachine.__table__

    # claim_many releases machines whose step is not runnable: make them runnable
    with services.db.write_conn() as conn:
        conn.execute(mm.update().where(mm.c.machine_id.in_(batch)).values(state="verifying"))

    def claim_runnable():
        with services.db.write_conn() as conn:
            started = time.process_time()
            jobs = runner.claims.claim_many(conn, "g", batch)
            spent = time.process_time() - started
            assert len(jobs) == BATCH
            machine_lock.release(conn, batch, "bench-host")
        return spent

    figures = {}

    def transitions():
        spent = {"apply": 0.0, "events": 0.0, "announce": 0.0}
        validated = machine_steps.on("validating", "validated")
        todo = [Move("g", m, validated, "fake-alt validated", options={"boot_timeout": 600})
                for m in batch]
        with services.db.write_conn() as conn:
            # each round makes the same move (the table has no way back)
            conn.execute(mm.update().where(mm.c.machine_id.in_(batch)).values(
                state="validating"))
            started = time.process_time()
            units = [UnitOfWork(conn, defer_events=True) for _ in todo]
            done = runner.moves.apply_many(conn, todo, units)
            applied = time.process_time()
            insert_events(conn, units)
            spent["apply"], spent["events"] = applied - started, time.process_time() - applied
        started = time.process_time()
        for d in done:
            runner.moves.announce(d)
        spent["announce"] = time.process_time() - started
        for key, value in spent.items():
            figures[key] = min(figures.get(key, float("inf")), value)
        return 0.0

    figures["claim"] = measure(rounds, claim_runnable)
    measure(rounds, transitions)
    with services.db.write_conn() as conn:
        # awaiting their boot with nobody waiting: left to a scan (no idle worker)
        conn.execute(mm.update().where(mm.c.machine_id.in_(batch)).values(
            state="awaiting_boot",
            updated_at=models.utcnow() - datetime.timedelta(seconds=60)))
    conductor = Conductor(services)
    conductor._in_flight = {f"busy-{n}" for n in range(BATCH)}  # no idle worker
    conductor._last_scan = time.monotonic()
    tick = measure(rounds * 3, conductor.tick)

    def full_tick():
        conductor._last_scan = float("-inf")
        conductor.tick()

    tick_full = measure(rounds, full_tick)
    services.db.dispose()
    rows = [(name, fmt(figures[key] / BATCH * 1e6, " us")) for name, key in (
        ("claim: lock + read steps and snapshots", "claim"),
        ("apply: one transition", "apply"), ("events: insert a transition's event", "events"),
        ("announce: log + hooks", "announce"))]
    rows += [("tick with nothing to move (per tick)", fmt(tick * 1e3, " ms")),
             ("tick with the full scan (per tick)", fmt(tick_full * 1e3, " ms"))]
    table(f"Conductor operations, one thread, SQLite, {count} machines, batches of {BATCH} "
          f"(CPU, best of {rounds})", ["operation", "CPU per machine"], rows)
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--machines", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    run(args.machines, args.rounds)


if __name__ == "__main__":
    main()
