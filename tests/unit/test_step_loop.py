"""The step loop: coroutine steps called from blocking code, calls handed to the
loop in order, group-commit outcomes awaited without a thread."""

import asyncio
import threading
import time

import pytest

from metalboot_framework.steploop import StepLoop, call_blocking, is_coroutine_step
from metalboot_framework.store.group_commit import Outcome


@pytest.fixture
def step_loop():
    loop = StepLoop(name="test-steps")
    yield loop
    loop.close()


class Task:
    def __init__(self, step_loop):
        self.services = type("S", (), {"step_loop": step_loop})()


class Interface:
    def __init__(self):
        self.threads = []

    async def activate(self, task):
        await asyncio.sleep(0)
        self.threads.append(threading.current_thread().name)
        return "reset"

    def clean_up(self, task):
        self.threads.append(threading.current_thread().name)
        return "cleaned"


def test_call_blocking_runs_a_coroutine_step_on_the_loop_and_a_plain_one_here(step_loop):
    iface = Interface()
    assert is_coroutine_step(iface.activate) and not is_coroutine_step(iface.clean_up)
    assert call_blocking(iface.activate, Task(step_loop)) == "reset"
    assert call_blocking(iface.clean_up, Task(step_loop)) == "cleaned"
    assert iface.threads == ["test-steps", threading.current_thread().name]


def test_a_coroutine_step_raising_raises_in_the_caller(step_loop):
    class Failing:
        async def prepare(self, task):
            raise ValueError("BMC said no")

    with pytest.raises(ValueError, match="BMC said no"):
        call_blocking(Failing().prepare, Task(step_loop))


def test_a_blocking_wait_on_the_loop_itself_is_refused(step_loop):
    async def inner():
        return 1

    async def outer():
        with pytest.raises(RuntimeError, match="would wait for itself"):
            step_loop.run(inner())
        return "refused"

    assert step_loop.run(outer()) == "refused"


def test_calls_from_many_threads_run_on_the_loop_in_each_threads_order(step_loop):
    seen = []

    def record(thread, n):
        assert threading.current_thread().name == "test-steps"
        seen.append((thread, n))

    def caller(thread):
        for n in range(500):
            step_loop.call_soon(record, thread, n)

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    step_loop.run(asyncio.sleep(0.05))
    assert len(seen) == 2000
    for t in range(4):
        assert [n for thread, n in seen if thread == t] == list(range(500))


def test_an_outcome_set_in_another_thread_is_awaited(step_loop):
    async def wait_for(outcome):
        return await step_loop.outcome(outcome)

    done, failed = Outcome(), Outcome()
    threading.Timer(0.05, done.set_result, ("committed",)).start()
    threading.Timer(0.05, failed.set_exception, (OSError("database is away"),)).start()
    assert step_loop.run(wait_for(done), timeout=5) == "committed"
    with pytest.raises(OSError, match="database is away"):
        step_loop.run(wait_for(failed), timeout=5)


def test_close_ends_the_thread_and_a_later_use_starts_another(step_loop):
    first = step_loop.loop
    step_loop.close()
    assert first.is_closed()
    assert not any(t.name == "test-steps" for t in threading.enumerate())

    async def answer():
        return 42

    assert step_loop.run(answer()) == 42
    assert step_loop.loop is not first


def test_blocking_calls_run_in_at_most_the_threads_allowed(step_loop):
    step_loop.set_threads(3)
    running, most = [0], [0]
    lock = threading.Lock()

    def blocking(n):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        if n == 7:
            raise ValueError("BMC said no")
        return threading.current_thread().name

    async def many():
        return await asyncio.gather(*(step_loop.call_in_thread(blocking, n) for n in range(10)),
                                    return_exceptions=True)

    answers = step_loop.run(many(), timeout=10)
    assert isinstance(answers[7], ValueError)
    names = {a for a in answers if isinstance(a, str)}
    assert most[0] == 3 and len(names) == 3  # three threads, each used again
    assert all(name.startswith("test-steps-thread-") for name in names)
