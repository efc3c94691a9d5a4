"""The announcer: what follows group commits, made in commit order in one thread."""

import concurrent.futures
import threading

from metalboot_framework import hookimpl
from metalboot_framework.announcer import Announcer


def test_announcements_are_made_in_order_and_a_failing_one_fails_alone(caplog):
    announcer = Announcer(name="test-announcer")
    made = []

    def fail():
        raise RuntimeError("hook bug")

    def record(n):
        made.append((n, threading.current_thread().name))

    announcer.put([(record, (1,)), (fail, ()), (record, (2,))])
    announcer.put([])
    announcer.put([(record, (3,))])
    assert announcer.flush(timeout=5)
    assert made == [(1, "test-announcer"), (2, "test-announcer"), (3, "test-announcer")]
    assert "announcing a committed change failed" in caplog.text


class EventRecorder:
    def __init__(self):
        self.kinds = []

    @hookimpl
    def metalboot_event(self, event):
        self.kinds.append((event["id"], int(event["message"].split()[-1])))


def test_grouped_writes_reach_the_hooks_in_commit_order(services):
    """Event hooks and a unit's announcements follow the commit, in the order of
    the commits (the event ids), whichever thread committed."""
    recorder = EventRecorder()
    services.hooks.pm.register(recorder, name="recorder")
    announced = []

    def write(n):
        def work(unit):
            unit.event("test.write", f"write {n}")
            unit.announce(announced.append, n)
        services.transactions.grouped(work).result()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(200)))
    assert services.transactions.announcer.flush(timeout=10)
    ids = [event_id for event_id, _ in recorder.kinds]
    assert len(ids) == 200 and ids == sorted(ids)  # hooks heard events in commit order
    # and each write's announcement right after its event's hook
    assert announced == [n for _, n in recorder.kinds]
    assert sorted(announced) == list(range(200))
