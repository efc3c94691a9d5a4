"""The per-machine lock (:mod:`metalboot_framework.conductor.machine_lock`)
against a real store in-process, and the rule that no other module writes it."""

import ast
import datetime
import pathlib
import threading

import pytest
from sqlalchemy import select, update

from metalboot_framework.conductor import machine_lock
from metalboot_framework.store import models
from tests.source_rules import breaches

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "metalboot_framework"
LOCK_COLUMNS = {"reservation", "reserved_at"}
# where the columns are defined, and the one module that writes them
ALLOWED = {PACKAGE / "conductor" / "machine_lock.py", PACKAGE / "store" / "models.py"}
WRITING_CALLS = {"values", "execute", "update", "insert"}


def lock_writes(source):
    """Line numbers of ``source`` that write a lock column: a keyword argument
    named after one, a dict key naming one passed to ``values``/``execute``/
    ``update``/``insert``, a column object as a dict key, an assignment to an
    attribute of that name, a ``setattr`` of it."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            lines += [node.lineno for kw in node.keywords if kw.arg in LOCK_COLUMNS]
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name == "setattr" and len(node.args) > 1 and isinstance(
                    node.args[1], ast.Constant) and node.args[1].value in LOCK_COLUMNS:
                lines.append(node.lineno)
            if name in WRITING_CALLS:
                for arg in node.args:
                    if isinstance(arg, ast.Dict) and any(
                            isinstance(k, ast.Constant) and k.value in LOCK_COLUMNS
                            for k in arg.keys):
                        lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            lines += [node.lineno for k in node.keys
                      if isinstance(k, ast.Attribute) and k.attr in LOCK_COLUMNS]
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            lines += [node.lineno for t in targets
                      if isinstance(t, ast.Attribute) and t.attr in LOCK_COLUMNS]
    return sorted(set(lines))


def package_modules():
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p not in ALLOWED and "migrations" not in p.relative_to(PACKAGE).parts)


def test_only_the_lock_module_writes_the_lock_columns():
    modules = package_modules()
    assert len(modules) > 50
    found = {str(p.relative_to(ROOT)): lines for p in modules
             if (lines := lock_writes(p.read_text()))}
    assert found == {}, "write the lock through conductor/machine_lock.py"


STORE = PACKAGE / "store"
LOCK_MODULE = PACKAGE / "conductor" / "machine_lock.py"


def lock_column_names(source):
    """Line numbers of ``source`` that name a lock column in code: a name, an
    attribute, a keyword argument or a string of that name (prose that speaks
    of a DHCP reservation is left alone)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        name = (node.id if isinstance(node, ast.Name) else
                node.attr if isinstance(node, ast.Attribute) else
                node.arg if isinstance(node, ast.keyword) else
                node.value if isinstance(node, ast.Constant) else None)
        if name in LOCK_COLUMNS:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_only_the_lock_module_and_the_store_name_the_lock_columns():
    """Who holds a machine, and the condition "nobody does", are asked of
    machine_lock (``holder``, ``unlocked``): no other module filters on the
    columns itself."""
    found = breaches(lock_column_names, allowed=[LOCK_MODULE], allowed_dirs=[STORE])
    assert found == {}, "ask conductor/machine_lock.py (unlocked(), holder())"


@pytest.mark.parametrize("source", [
    "select(M.id).where(M.reservation.is_(None))",
    "_M.c.reserved_at < before",
    "view = {'reservation': None}",
    "getattr(m, 'reserved_at')",
    "f(reservation=None)",
])
def test_the_name_check_sees_each_form(source):
    assert lock_column_names(source) == [1]


def test_the_name_check_lets_prose_be():
    assert lock_column_names('"""Each DHCP reservation of a NIC."""\nx = "a reservation"') == []


@pytest.mark.parametrize("source", [
    "update(M).where(M.id == x).values(reservation=None, reserved_at=None)",
    "s.execute(update(models.Machine).values({'reservation': host}))",
    "update(_M).values({_M.c.reserved_at: now})",
    "m.reservation = 'conductor-a'",
    "setattr(m, 'reserved_at', None)",
    "models.Machine(id='m', reservation='x')",
])
def test_the_check_sees_each_form_of_write(source):
    assert lock_writes(source) == [1]


def test_the_check_lets_reads_be():
    assert lock_writes("select(M.id).where(M.reservation.is_(None), M.c.reserved_at < t)\n"
                       "view = {'reservation': None}\n"
                       "lock = m.reservation\n") == []


# -- the lock against the store -----------------------------------------------------------

IDS = [f"00000000-0000-4000-8000-{i:012x}" for i in range(6)]


@pytest.fixture
def db(services):
    now = models.utcnow()
    with services.db.write_conn() as conn:
        conn.execute(models.Partition.__table__.insert(), {"id": "p1"})
        conn.execute(models.Machine.__table__.insert(), [
            {"id": m, "partition_id": "p1", "boot_interface": "fake",
             "state": "enrolling" if i == 0 else "ready", "properties": {},
             "updated_at": now} for i, m in enumerate(IDS)])
    return services.db


def holders(db):
    with db.read_conn() as conn:
        return dict(conn.execute(select(models.Machine.id, models.Machine.reservation)).all())


def reserved_at(db, machine_id):
    with db.read_conn() as conn:
        return conn.execute(select(models.Machine.reserved_at).where(
            models.Machine.id == machine_id)).scalar()


def set_holder(db, machine_ids, host, age=0):
    """What a holder left (a test's shortcut, not through the module)."""
    with db.write_conn() as conn:
        conn.execute(update(models.Machine).where(models.Machine.id.in_(machine_ids)).values(
            {models.Machine.reservation: host,
             models.Machine.reserved_at: models.utcnow() - datetime.timedelta(seconds=age)}))


def test_of_two_holders_racing_for_the_same_machines_each_gets_a_machine_once(db):
    results = {}
    barrier = threading.Barrier(2)

    def race(host, ids):
        barrier.wait()
        with db.write_conn() as conn:
            results[host] = machine_lock.take(conn, ids, host)

    threads = [threading.Thread(target=race, args=("conductor-a", IDS)),
               threading.Thread(target=race, args=("conductor-b", list(reversed(IDS))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    a, b = set(results["conductor-a"]), set(results["conductor-b"])
    assert not a & b and a | b == set(IDS)
    assert holders(db) == {**{m: "conductor-a" for m in a}, **{m: "conductor-b" for m in b}}


def test_a_take_of_partly_held_machines_reads_back_those_it_took(db):
    set_holder(db, IDS[:2], "conductor-a")
    with db.write_conn() as conn:
        taken = machine_lock.take(conn, IDS[1:4], "conductor-b")
    assert sorted(taken) == sorted(IDS[2:4])
    assert holders(db) == {IDS[0]: "conductor-a", IDS[1]: "conductor-a",
                           IDS[2]: "conductor-b", IDS[3]: "conductor-b",
                           IDS[4]: None, IDS[5]: None}


def test_a_holder_releases_only_its_own_locks(db):
    set_holder(db, IDS[:2], "conductor-a")
    set_holder(db, IDS[2:4], "conductor-b")
    with db.write_conn() as conn:
        machine_lock.release(conn, IDS, "conductor-b")
        machine_lock.release_one(conn, IDS[0], "conductor-b")
    assert holders(db) == {IDS[0]: "conductor-a", IDS[1]: "conductor-a",
                           **{m: None for m in IDS[2:]}}
    assert reserved_at(db, IDS[2]) is None
    with db.write_conn() as conn:
        machine_lock.release_one(conn, IDS[0], "conductor-a")
        # an UPDATE made releasing drops only the lock of the host it is bound to
        stmt = machine_lock.releasing(update(models.Machine.__table__).values(
            last_error="x"))
        conn.execute(stmt, {"host": "conductor-b"})
    assert holders(db)[IDS[0]] is None and holders(db)[IDS[1]] == "conductor-a"
    set_holder(db, IDS[4:], "conductor-b")
    with db.write_conn() as conn:
        assert machine_lock.release_all(conn, "conductor-b") == 2
    assert holders(db) == {**{m: None for m in IDS}, IDS[1]: "conductor-a"}


def test_a_machine_at_rest_is_taken_only_in_the_workers_state(db):
    with db.write_conn() as conn:
        assert not machine_lock.take_in_state(conn, IDS[1], "enrolling", "conductor-a")
        assert machine_lock.take_in_state(conn, IDS[0], "enrolling", "conductor-a")
        assert not machine_lock.take_in_state(conn, IDS[0], "enrolling", "conductor-b")
    assert holders(db)[IDS[0]] == "conductor-a" and holders(db)[IDS[1]] is None


def test_the_locks_of_a_dead_conductor_are_released_once_and_taken_over(db):
    now = models.utcnow()
    with db.write_conn() as conn:
        conn.execute(models.Conductor.__table__.insert(), [
            {"hostname": "dead", "started_at": now, "online": True,
             "heartbeat_at": now - datetime.timedelta(seconds=120)},
            {"hostname": "gone-before", "started_at": now, "online": False,
             "heartbeat_at": now - datetime.timedelta(seconds=120)},
            {"hostname": "live", "started_at": now, "online": True, "heartbeat_at": now}])
    set_holder(db, IDS[:2], "dead")
    set_holder(db, IDS[2:3], "live")
    set_holder(db, IDS[3:4], "gone-before")  # offline: already handled, left alone
    limit = now - datetime.timedelta(seconds=60)
    with db.write_conn() as conn:
        assert machine_lock.release_of_dead(conn, limit) == (["dead"], 2)
    with db.write_conn() as conn:
        assert machine_lock.release_of_dead(conn, limit) == ([], 0)
        online = dict(conn.execute(select(models.Conductor.hostname,
                                          models.Conductor.online)).all())
        taken = machine_lock.take(conn, IDS[:3], "live")
    assert online == {"dead": False, "gone-before": False, "live": True}
    assert sorted(taken) == sorted(IDS[:2])
    assert holders(db) == {IDS[0]: "live", IDS[1]: "live", IDS[2]: "live",
                           IDS[3]: "gone-before", IDS[4]: None, IDS[5]: None}


def test_only_old_locks_on_machines_no_worker_runs_are_leaked(db):
    set_holder(db, IDS[:2], "conductor-a", age=60)   # IDS[1]: a worker runs it
    set_holder(db, IDS[2:3], "conductor-a")          # on its way to a worker
    set_holder(db, IDS[3:4], "conductor-b", age=60)  # someone else's
    before = models.utcnow() - datetime.timedelta(seconds=10)
    with db.write_conn() as conn:
        assert machine_lock.release_leaked(conn, "conductor-a", before, [IDS[1]]) == [IDS[0]]
        assert machine_lock.release_leaked(conn, "conductor-a", before, []) == [IDS[1]]
    assert holders(db) == {IDS[0]: None, IDS[1]: None, IDS[2]: "conductor-a",
                           IDS[3]: "conductor-b", IDS[4]: None, IDS[5]: None}


def test_unlocked_and_holder_tell_who_holds_a_machine(db):
    set_holder(db, IDS[:2], "conductor-a")
    with db.read_conn() as conn:
        free = set(conn.execute(select(models.Machine.id).where(
            machine_lock.unlocked())).scalars())
        rows = {row.id: row for row in conn.execute(select(models.Machine.__table__))}
    assert free == set(IDS[2:])
    assert machine_lock.holder(rows[IDS[0]])[0] == "conductor-a"
    assert machine_lock.holder(rows[IDS[2]]) is None


def test_a_held_lock_is_released_when_its_work_ends_even_by_an_error(services, db):
    with db.write_conn() as conn:
        lock = machine_lock.Held.take_in_state(conn, services, IDS[0], "enrolling",
                                               "conductor-a")
        assert machine_lock.Held.take_in_state(conn, services, IDS[0], "enrolling",
                                               "conductor-b") is None
    assert holders(db)[IDS[0]] == "conductor-a"
    with pytest.raises(RuntimeError), lock:
        raise RuntimeError("the work failed")
    assert holders(db)[IDS[0]] is None and not lock.held


def test_a_lock_dropped_with_the_works_last_write_is_not_released_again(services, db):
    with db.write_conn() as conn:
        lock = machine_lock.Held.take_in_state(conn, services, IDS[0], "enrolling",
                                               "conductor-a")
    with lock:
        with db.write_conn() as conn:
            lock.release_in(conn)
        lock.dropped()
        # taken again by the same conductor for other work: not this block's to release
        with db.write_conn() as conn:
            assert machine_lock.take(conn, [IDS[0]], "conductor-a") == [IDS[0]]
    assert holders(db)[IDS[0]] == "conductor-a"


def test_a_held_lock_is_released_by_a_coroutine_leaving_its_block(services, db):
    with db.write_conn() as conn:
        lock = machine_lock.Held.take_in_state(conn, services, IDS[0], "enrolling",
                                               "conductor-a")

    async def work():
        async with lock:
            assert holders(db)[IDS[0]] == "conductor-a"

    services.step_loop.run(work())
    assert holders(db)[IDS[0]] is None
