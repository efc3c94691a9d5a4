"""The evidence watcher (:mod:`metalboot_framework.conductor.evidence`) in one
process against a real store: the boot server's rows are written straight
into ``boot_evidence``, as its process commits them; the waits are the
coroutines' (on the services' step loop)."""

import asyncio
import datetime
import time
import types

import pytest

from metalboot_framework.conductor import evidence as evidence_mod
from metalboot_framework.conductor.evidence import EvidenceWatcher
from metalboot_framework.store import models

IDS = [f"00000000-0000-4000-8000-{i:012x}" for i in range(3)]
TARGET = "fake-alt"


@pytest.fixture
def watcher(services, monkeypatch):
    monkeypatch.setattr(evidence_mod, "FULL_LOOK_INTERVAL", 0.5)
    with services.db.write_conn() as conn:
        conn.execute(models.Partition.__table__.insert(), {"id": "p1"})
        conn.execute(models.Machine.__table__.insert(), [
            {"id": m, "partition_id": "p1", "boot_interface": "fake", "state": "migrating",
             "properties": {}} for m in IDS])
    w = EvidenceWatcher(services, 0.01)
    w.start()
    yield w
    w.stop()


def job(machine_id, activated_at=None, **options):
    return types.SimpleNamespace(migration_id="m1", machine_id=machine_id, target=TARGET,
                                 activated_at=activated_at or models.utcnow(), options=options)


def record(services, machine_id, kind="report", interface=TARGET, ago=0, id_=None):
    """A row as the boot server commits it; its id."""
    row = {"machine_id": machine_id, "interface": interface, "kind": kind, "path": "",
           "client_address": "127.0.0.1",
           "created_at": models.utcnow() - datetime.timedelta(seconds=ago)}
    if id_ is not None:
        row["id"] = id_
    with services.db.write_conn() as conn:
        return conn.execute(models.BootEvidence.__table__.insert().values(row)) \
            .inserted_primary_key[0]


def start_wait(services, watcher, the_job, seconds, due_in=None):
    """The wait of a coroutine, as a future of this thread; ``due_in``: seconds
    to its deadline, if not ``seconds`` (negative: already past)."""
    deadline = time.monotonic() + (seconds if due_in is None else due_in)
    return asyncio.run_coroutine_threadsafe(watcher.await_boot(the_job, deadline, seconds),
                                            services.step_loop.loop)


def test_evidence_committed_before_the_wait_ends_it(services, watcher):
    activated = models.utcnow() - datetime.timedelta(seconds=5)
    found = record(services, IDS[0])
    ended = start_wait(services, watcher, job(IDS[0], activated), 30).result(10)
    assert ended[0] == "evidence" and ended[3] == found
    assert ended[1] == "boot evidence: report of  from 127.0.0.1"


def test_evidence_committed_while_waiting_ends_the_wait(services, watcher):
    waiting = start_wait(services, watcher, job(IDS[0]), 30)
    time.sleep(0.2)
    assert not waiting.done()
    record(services, IDS[1])  # another machine's
    time.sleep(0.2)
    assert not waiting.done()
    found = record(services, IDS[0])
    ended = waiting.result(10)
    assert ended[0] == "evidence" and ended[3] == found


def test_no_evidence_since_the_activation_times_out(services, watcher):
    record(services, IDS[0], ago=60)  # before the activation: does not count
    record(services, IDS[0], interface="fake")  # through the source: does not count
    started = time.monotonic()
    ended = start_wait(services, watcher, job(IDS[0]), 1).result(10)
    assert ended == ("boot_timeout", "no boot evidence through fake-alt within 1 s",
                     "no boot evidence through fake-alt within 1 s", None)
    assert time.monotonic() - started >= 0.95


def test_a_wait_resumed_after_its_deadline_finds_the_evidence_first(services, watcher):
    """A conductor that takes over a machine awaiting its boot after the
    deadline its move persisted still moves it on by the evidence that is there."""
    activated = models.utcnow() - datetime.timedelta(seconds=120)
    found = record(services, IDS[0], ago=30)
    ended = start_wait(services, watcher, job(IDS[0], activated), 60, due_in=-5).result(10)
    assert ended[0] == "evidence" and ended[3] == found
    late = start_wait(services, watcher, job(IDS[1], activated), 60, due_in=-5).result(10)
    assert late[0] == "boot_timeout"


def test_evidence_committed_out_of_id_order_is_found_by_the_backstop(services, watcher):
    """PostgreSQL may commit a row after one with a higher id: the cursor
    has passed it, the look at every waiting machine's evidence finds it."""
    waiting = start_wait(services, watcher, job(IDS[0]), 30)
    record(services, IDS[1], id_=1000)
    time.sleep(0.1)  # the cursor is at 1000
    found = record(services, IDS[0], id_=500)
    ended = waiting.result(10)
    assert ended[0] == "evidence" and ended[3] == found == 500


def test_a_report_is_required_when_the_migration_says_so(services, watcher):
    record(services, IDS[0], kind="fetch")
    ended = start_wait(services, watcher, job(IDS[0], require_boot_report=True), 0.3)
    assert ended.result(10)[0] == "boot_timeout"


def test_a_wake_ends_the_waits_of_one_migration_without_a_result(services, watcher):
    waiting = start_wait(services, watcher, job(IDS[0]), 30)
    other = types.SimpleNamespace(**dict(vars(job(IDS[1])), migration_id="m2"))
    kept = start_wait(services, watcher, other, 30)
    time.sleep(0.1)
    watcher.wake("m1")
    assert waiting.result(10) is None
    time.sleep(0.1)
    assert not kept.done()
    watcher.wake()
    assert kept.result(10) is None
