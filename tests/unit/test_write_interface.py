"""One way to write: ``Transactions.now``, ``.grouped`` and ``.batched``, each
for blocking code and for coroutines; nothing outside ``store/`` and
``transactions.py`` opens a write transaction of the database itself."""

import ast
import asyncio
import pathlib
import threading

import pytest

from metalboot_framework import hookimpl
from metalboot_framework.transactions import Transactions

ROOT = pathlib.Path(__file__).resolve().parents[2]
# the Database's ways to write (metalboot_framework/store/db.py)
DATABASE_WRITES = {"write", "write_conn", "write_conn_nowait", "write_engine"}
ALLOWED = (ROOT / "metalboot_framework" / "store", ROOT / "metalboot_framework" / "transactions.py")


def database_writes(source, name="<source>"):
    """(line, text) of every ``<...>db.write*`` in ``source``: the attribute of
    an object named ``db`` (``db.write()``, ``services.db.write_conn()``)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Attribute) and node.attr in DATABASE_WRITES:
            if _name_of(node.value) == "db":
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_walk_finds_every_way_a_database_write_is_spelled():
    source = ("with db.write() as s: pass\n"
              "with self.services.db.write_conn() as c: pass\n"
              "opened = services.db.write_conn_nowait\n"
              "services.db.write_engine.connect()\n"
              "with services.db.read_conn() as c: pass\n"
              "f.write(text)\n")
    assert [line for line, _ in database_writes(source)] == [1, 2, 3, 4]


def test_nothing_outside_the_store_and_transactions_writes_to_the_database():
    files = [path for top in ("metalboot_framework", "plugins")
             for path in sorted((ROOT / top).rglob("*.py"))
             if not any(path == allowed or allowed in path.parents for allowed in ALLOWED)]
    assert len(files) > 100  # the walk saw the code
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text}" for path in files
                 for line, text in database_writes(path.read_text(), str(path))]
    assert offenders == [], "write through services.transactions (now, grouped, batched)"


# what Transactions offered before now, grouped and batched
FORMER_WAYS = {"write", "write_grouped", "write_batched", "write_batched_later",
               "awrite_grouped", "awrite_batched", "asettle", "record_event", "arecord_event"}


def former_writes(source, name="<source>"):
    """(line, text) of every ``<...>transactions.<former way>`` in ``source``."""
    return sorted((node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(source, name))
                  if isinstance(node, ast.Attribute) and node.attr in FORMER_WAYS
                  and _name_of(node.value) == "transactions")


def _name_of(node):
    return node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else None


def test_no_code_calls_a_former_way_to_write():
    """Code written against the nine former methods (a branch merged later,
    say) fails here with its lines, not at run time."""
    assert former_writes("self.services.transactions.write_grouped(w)\n"
                         "task.record_event('a', 'b')\n"
                         "await services.transactions.asettle(p)\n") == [
        (1, "self.services.transactions.write_grouped"), (3, "services.transactions.asettle")]
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text}"
                 for top in ("metalboot_framework", "plugins", "tests", "benchmarks", "examples")
                 for path in sorted((ROOT / top).rglob("*.py")) if "build" not in path.parts
                 for line, text in former_writes(path.read_text(), str(path))]
    assert offenders == [], "use transactions.now, .grouped(...).result() or await .batched(...)"


def test_three_entry_points():
    public = [name for name, value in vars(Transactions).items()
              if callable(value) and not name.startswith("_")]
    assert public == ["now", "grouped", "batched"]


class EventRecorder:
    def __init__(self):
        self.events = []

    @hookimpl
    def metalboot_event(self, event):
        self.events.append(event["kind"])


@pytest.fixture
def recorder(services):
    recorder = EventRecorder()
    services.hooks.pm.register(recorder, name="recorder")
    return recorder


def kinds(api):
    r = api.get("/v1/events?limit=100")
    assert r.status_code == 200, r.json
    return [ev["kind"] for ev in r.json["events"]]


def test_async_with_now_waits_for_the_database_in_a_thread(services, api, recorder):
    """``async with now()``: the loop goes on while the write waits for another
    writer (SQLite: the write lock); the block's events are committed and reach
    the hooks once it ends."""
    holding, release = threading.Event(), threading.Event()

    def hold():
        with services.transactions.now() as unit:
            unit.event("test.held", "held by a thread")
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)

    async def main():
        async def write():
            async with services.transactions.now() as unit:
                unit.event("test.async", "written by a coroutine")

        task = asyncio.ensure_future(write())
        ticks = 0
        while ticks < 10:  # the loop is free while the write waits
            await asyncio.sleep(0.01)
            ticks += 1
        if services.db.is_sqlite:
            assert not task.done()  # it waits for the holder's write lock
        release.set()
        await task
        return ticks

    assert asyncio.run(main()) == 10
    holder.join(10)
    # SQLite: in the order of the write lock; PostgreSQL: the coroutine's may come first
    order = (lambda kinds: kinds) if services.db.is_sqlite else sorted
    assert order(kinds(api)[-2:]) == order(["test.held", "test.async"])
    assert order(recorder.events) == order(["test.held", "test.async"])


def test_a_coroutine_cancelled_while_waiting_leaves_the_database_free(services, api):
    if not services.db.is_sqlite:
        pytest.skip("SQLite's write lock: PostgreSQL begins without waiting")
    holding, release = threading.Event(), threading.Event()

    def hold():
        with services.transactions.now():
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    ran = []
    transaction = services.transactions.now()  # kept: its end is not left to the GC

    async def main():
        async def write():
            async with transaction as unit:
                unit.event("test.cancelled", "never written")
                ran.append(True)

        task = asyncio.ensure_future(write())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(main())  # its executor's threads end before it returns
    holder.join(10)

    def after():
        with services.transactions.now() as unit:
            unit.event("test.after", "written after the cancel")

    writer = threading.Thread(target=after, daemon=True)
    writer.start()
    writer.join(10)
    assert not writer.is_alive()  # the write lock is free again
    assert ran == []
    assert "test.cancelled" not in kinds(api) and "test.after" in kinds(api)


def test_grouped_is_waited_for_in_a_thread_or_awaited_on_any_loop(services, api, recorder):
    def event(kind):
        def work(unit):
            unit.event(kind, f"written by {kind}")
            return kind
        return work

    assert services.transactions.grouped(event("test.blocking")).result() == "test.blocking"

    async def on_a_loop(kind):
        return await services.transactions.grouped(event(kind))

    assert services.step_loop.run(on_a_loop("test.step-loop")) == "test.step-loop"
    assert asyncio.run(on_a_loop("test.other-loop")) == "test.other-loop"
    assert services.transactions.announcer.flush(timeout=10)
    expected = ["test.blocking", "test.step-loop", "test.other-loop"]
    assert kinds(api)[-3:] == expected
    assert recorder.events == expected  # after commit, in order


def test_a_batched_write_awaited_later_gives_its_result_or_its_error(services):
    """A batch's items are written together; each caller gets its own result,
    or the error its item raised, however it waits."""
    def many(conn, items):
        from metalboot_framework.transactions import UnitOfWork
        if "bad" in items:
            raise ValueError("a bad item")
        return [(UnitOfWork(conn, defer_events=True), (item, len(items))) for item in items]

    async def later():
        first = services.transactions.batched(many, "a")
        second = services.transactions.batched(many, "b")
        await asyncio.sleep(0)  # the caller goes on before the commit
        return await first, await second

    (a, with_a), (b, with_b) = services.step_loop.run(later())
    assert (a, b) == ("a", "b") and with_a == with_b and 1 <= with_a <= 2
    bad = services.transactions.batched(many, "bad")
    with pytest.raises(ValueError, match="a bad item"):
        bad.result()

    async def awaited():
        await bad

    with pytest.raises(ValueError, match="a bad item"):
        services.step_loop.run(awaited())
