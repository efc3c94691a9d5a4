"""The alembic revisions build exactly the schema the models describe."""

import alembic.command
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from metalboot_framework.store import models
from metalboot_framework.store.db import Database
from metalboot_framework.store.models import Base


def test_migrations_match_models(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    assert db.current_revision() is not None
    with db.write_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_upgrade_is_repeatable(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    first = db.current_revision()
    db.upgrade()
    assert db.current_revision() == first


def test_revisions_follow_every_change_a_snapshot_is_made_of(tmp_path, database_url):
    """The boot server keeps a cached machine while its revisions stand still:
    the triggers must move them on any write of what the cache holds (by any
    SQL, not only ours), and not on lock or error writes. Also on PostgreSQL."""
    db = Database(database_url or f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()

    def revisions():
        with db.read_conn() as conn:
            return dict(conn.exec_driver_sql(
                "SELECT m.id, m.revision * 1000 + p.revision FROM machines m "
                "JOIN partitions p ON p.id = m.partition_id").all())

    def write(sql):
        before = revisions()
        with db.write_conn() as conn:
            conn.exec_driver_sql(sql)
        after = revisions()
        return {m for m in after if after[m] != before.get(m)}

    try:
        with db.write_conn() as conn:
            # Core inserts: the models' Python-side defaults fill the rest
            conn.execute(models.Partition.__table__.insert(), {"id": "p1"})
            conn.execute(models.Machine.__table__.insert(), [
                {"id": m, "partition_id": "p1", "boot_interface": "pxe"} for m in ("m1", "m2")])
        assert revisions() == {"m1": 1001, "m2": 1001}
        # every column of the snapshot, one by one: only that machine moves
        for assignment in ("boot_interface = 'fake'", "state = 'migrating'",
                           "token_generation = token_generation + 1",
                           "bmc_password = 'x'", "bmc_address = 'h'", "bmc_username = 'u'",
                           "bmc_verify_tls = false", "boot_mode = 'bios'",
                           "prepared_interface = 'fake'", "properties = '{\"a\": 1}'"):
            assert write(f"UPDATE machines SET {assignment} WHERE id = 'm1'") == {"m1"}, \
                assignment
        # locks, errors, drift and timestamps are not in a snapshot
        for assignment in ("reservation = 'conductor-1'", "last_error = 'boom'",
                           "updated_at = CURRENT_TIMESTAMP", "drift_checked_at = NULL"):
            assert write(f"UPDATE machines SET {assignment} WHERE id = 'm1'") == set(), \
                assignment
        # NICs: added, changed, moved (both machines), removed
        assert write("INSERT INTO nics (mac, machine_id, position) "
                     "VALUES ('aa:bb:cc:dd:ee:01', 'm1', 0)") == {"m1"}
        assert write("UPDATE nics SET ipv4_address = '10.0.0.1'") == {"m1"}
        assert write("UPDATE nics SET machine_id = 'm2'") == {"m1", "m2"}
        assert write("DELETE FROM nics") == {"m2"}
        # the partition: every machine in it
        assert write("UPDATE partitions SET cmdline = 'console=ttyS1'") == {"m1", "m2"}
        assert write("UPDATE partitions SET updated_at = CURRENT_TIMESTAMP") == set()
        # what the boot server compares: by ids, or every machine at once
        from metalboot_framework import artifacts
        with db.read_conn() as conn:
            every = artifacts.snapshot_revisions(conn, None)
            assert every == artifacts.snapshot_revisions(conn, ["m1", "m2", "nope"])
        assert {m: r[0] * 1000 + r[2] for m, r in every.items()} == revisions()
    finally:
        db.dispose()


def test_sqlite_write_transactions_hold_the_process_write_lock(tmp_path):
    """Other processes' writers queue on ``<database>.write-lock`` instead of
    sleeping in SQLite's busy handler: the lock is held exactly while a write
    transaction is open (seen from another process, as POSIX locks are)."""
    import subprocess
    import sys

    db = Database(f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
             "except OSError:\n    print('held')\n")

    def lock_state():
        return subprocess.run([sys.executable, "-c", probe, f"{tmp_path}/m.sqlite.write-lock"],
                              capture_output=True, text=True, check=True).stdout.strip()

    try:
        with db.write_conn() as conn:
            conn.exec_driver_sql("SELECT 1")
            assert lock_state() == "held"
        assert lock_state() == "free"
        with db.write() as session:
            session.execute(sqlalchemy.text("SELECT 1"))
            assert lock_state() == "held"
        assert lock_state() == "free"
    finally:
        db.dispose()


def test_nowait_write_never_waits_and_leaves_no_pragma_behind(tmp_path):
    """write_conn_nowait (the boot server's evidence on its event loop): None
    while another process holds the write lock or a thread of this one writes;
    a write transaction otherwise, whose connection gets its busy timeout and
    automatic checkpoints back afterwards."""
    import subprocess
    import sys
    import threading

    db = Database(f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
         "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()\n",
         f"{tmp_path}/m.sqlite.write-lock"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    insert = models.Partition.__table__.insert()
    try:
        assert holder.stdout.readline().strip() == "held"
        with db.write_conn_nowait() as conn:
            assert conn is None
        holder.stdin.close()
        holder.wait(10)
        inside, release = threading.Event(), threading.Event()

        def thread_writer():
            with db.write_conn() as conn:
                conn.execute(insert, {"id": "by-thread"})
                inside.set()
                release.wait(10)

        writer = threading.Thread(target=thread_writer)
        writer.start()
        assert inside.wait(10)
        with db.write_conn_nowait() as conn:
            assert conn is None
        release.set()
        writer.join(10)
        for n in range(3):
            with db.write_conn_nowait() as conn:
                assert conn is not None
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 0
                assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
                conn.execute(insert, {"id": f"inline-{n}"})
        for _ in range(3):  # every pooled connection: the usual settings again
            with db.write_conn() as conn:
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000
                assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
        with db.read_conn() as conn:
            assert sorted(conn.exec_driver_sql("SELECT id FROM partitions").scalars()) == \
                ["by-thread", "inline-0", "inline-1", "inline-2"]
        db.checkpoint()  # outside a transaction (in one, SQLite refuses it)
    finally:
        if holder.poll() is None:
            holder.kill()
        db.dispose()


def test_downgrade_keeps_machines_and_nics(tmp_path, database_url):
    """Downgrades that drop machine columns must not copy the machines table:
    on SQLite dropping the old copy would delete every NIC (ON DELETE CASCADE)."""
    db = Database(database_url or f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    try:
        with db.write_conn() as conn:
            conn.execute(models.Partition.__table__.insert(), {"id": "p1"})
            conn.execute(models.Machine.__table__.insert(),
                         {"id": "m1", "partition_id": "p1", "boot_interface": "pxe"})
            conn.execute(models.Nic.__table__.insert(),
                         {"mac": "aa:bb:cc:dd:ee:01", "machine_id": "m1"})
        with db.write_engine.connect() as connection:
            alembic.command.downgrade(db.alembic_config(connection), "0003")
            connection.commit()
        with db.read_conn() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM nics").scalar() == 1
            assert conn.exec_driver_sql("SELECT count(*) FROM machines").scalar() == 1
        db.upgrade()
        with db.read_conn() as conn:
            assert conn.exec_driver_sql("SELECT revision FROM machines").scalar() == 1
    finally:
        db.dispose()


def test_evidence_batches_are_the_rows_single_inserts_write(tmp_path, database_url,
                                                           monkeypatch):
    """A boot server's evidence batch (on SQLite: an executemany of the
    driver, values bound by the columns' processors) stores each row exactly as
    one INSERT of SQLAlchemy stores it: JSON null and objects, microsecond
    timestamps, no address, in the batch's order. Also on PostgreSQL."""
    import datetime

    from metalboot_framework import artifacts

    db = Database(database_url or f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    times = iter([datetime.datetime(2026, 12, 1, 1, 0, 0),  # no microseconds: stored with
                  datetime.datetime(2026, 12, 1, 1, 0, 0, 123456)] * 20)
    monkeypatch.setattr(models, "utcnow", lambda: next(times))
    rows = [artifacts.fetch_evidence(f"m{n}", "fake", "boot.ipxe", "10.0.0.%d" % n,
                                     "bytes=0-5" if n % 2 else None) for n in range(7)]
    rows.append(artifacts.report_evidence("m7", {"boot_interface": "fake",
                                                 "message": "up \u2713"}, None))
    columns = "machine_id, interface, kind, path, client_address, data, created_at"
    try:
        with db.write_conn() as conn:  # the reference: one SQLAlchemy INSERT per row
            for row in rows:
                conn.execute(models.BootEvidence.__table__.insert(), row)
        with db.write_conn() as conn:
            artifacts.insert_evidence(conn, rows)
        with db.read_conn() as conn:
            stored = [tuple(r) for r in conn.exec_driver_sql(
                f"SELECT {columns} FROM boot_evidence ORDER BY id")]
            typed = conn.execute(sqlalchemy.select(models.BootEvidence.__table__)
                                 .order_by(models.BootEvidence.id)).all()
        assert len(stored) == 2 * len(rows)
        assert stored[len(rows):] == stored[:len(rows)]
        assert [(r.machine_id, r.data, r.created_at) for r in typed[len(rows):]] == \
            [(r["machine_id"], r["data"], r["created_at"]) for r in rows]
    finally:
        db.dispose()


def test_deferred_events_are_the_rows_a_single_insert_writes(tmp_path, database_url,
                                                            monkeypatch):
    """The group commit's events (on SQLite written with ids given in the write
    transaction and the driver's executemany) are stored exactly as one
    INSERT .. RETURNING of the same event stores them, with ids in order after
    the newest. Also on PostgreSQL (SQLAlchemy's multi-row path there)."""
    import datetime

    from metalboot_framework.transactions import UnitOfWork, insert_events

    db = Database(database_url or f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    when = datetime.datetime(2026, 11, 30, 22, 0, 0)  # no microseconds: stored with them
    monkeypatch.setattr(models, "utcnow", lambda: when)
    kinds = [("a.b", "plain", None), ("c.d", "unicode \u2713", {"old": "pxe", "n": [1, None]}),
             ("e.f", "", {})]
    try:
        with db.write_conn() as conn:
            single = UnitOfWork(conn)
            for kind, message, data in kinds:
                single.event(kind, message, machine_id="m1", migration_id="g1", data=data)
        with db.write_conn() as conn:
            deferred = [UnitOfWork(conn, defer_events=True) for _ in range(2)]
            for n, (kind, message, data) in enumerate(kinds):
                deferred[n % 2].event(kind, message, machine_id="m1", migration_id="g1",
                                      data=data)
            insert_events(conn, deferred)
        first = [ev.id for ev in single.events]
        later = [ev.id for ev in deferred[0].events + deferred[1].events]
        assert sorted(later) == list(range(max(first) + 1, max(first) + 4))
        # in the order the units were given: unit 0's events, then unit 1's
        assert later == [max(first) + 1, max(first) + 2, max(first) + 3]
        columns = "kind, message, machine_id, migration_id, data, created_at"
        with db.read_conn() as conn:
            stored = {row[0]: row[1:] for row in conn.exec_driver_sql(
                f"SELECT id, {columns} FROM events ORDER BY id")}
            typed = {ev.id: ev for ev in conn.execute(sqlalchemy.select(models.Event.__table__))}
        by_content = {}
        for ev in single.events:
            by_content[(ev.kind, ev.message)] = ev.id
        for ev in deferred[0].events + deferred[1].events:
            assert stored[ev.id] == stored[by_content[(ev.kind, ev.message)]]
            assert typed[ev.id].data == ev.data and typed[ev.id].created_at == when
    finally:
        db.dispose()


def test_canaries_skipped_at_once_are_replaced_by_different_machines(tmp_path, database_url):
    """Two conductors skip the two canaries of one wave in overlapping
    transactions: each skipped canary gets its own successor (on PostgreSQL the
    second skips the row the first locked; on SQLite it waits for the first)."""
    import threading
    import time

    from metalboot_framework.conductor import canaries

    db = Database(database_url or f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    mmt = models.MigrationMachine.__table__
    try:
        with db.write_conn() as conn:
            conn.execute(models.Migration.__table__.insert(), {
                "id": "g", "state": "running", "target_boot_interface": "fake",
                "selector": {}, "options": {}, "total": 6, "created_at": models.utcnow()})
            conn.execute(mmt.insert(), [{
                "migration_id": "g", "machine_id": f"m{i}", "position": i, "canary": i < 2,
                "source_boot_interface": "pxe", "attempt": 0,
                "state": "validating" if i < 2 else "queued"} for i in range(6)])
        replaced, second_started = {}, threading.Event()

        def skip(machine_id):
            with db.write_conn() as conn:
                conn.execute(mmt.update().where(mmt.c.machine_id == machine_id)
                             .values(state="skipped"))
                second_started.set()
                replaced.update(canaries.replace(conn, "g", [machine_id]))

        with db.write_conn() as conn:
            conn.execute(mmt.update().where(mmt.c.machine_id == "m0").values(state="skipped"))
            replaced.update(canaries.replace(conn, "g", ["m0"]))
            other = threading.Thread(target=skip, args=("m1",))
            other.start()
            if database_url:  # PostgreSQL: it chooses while this one holds its choice
                assert second_started.wait(10)
                time.sleep(0.5)
            # SQLite: it waits for the write lock until this transaction commits
        other.join(30)
        assert replaced == {"m0": "m2", "m1": "m3"}
        with db.read_conn() as conn:
            canaries = set(conn.execute(sqlalchemy.select(mmt.c.machine_id).where(
                mmt.c.canary.is_(True))).scalars())
        assert canaries == {"m0", "m1", "m2", "m3"}
    finally:
        db.dispose()


def test_upgrade_gives_finished_migrations_their_result(tmp_path, database_url):
    """Migrations finished before the result column existed get the result their
    machines' steps give; one halted with machines still in flight is halting;
    a downgrade keeps the migrations and their machines."""
    db = Database(database_url or f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    try:
        with db.write_engine.connect() as connection:
            alembic.command.downgrade(db.alembic_config(connection), "0006")
            connection.commit()
        steps = {"all-failed": ["rolled_back", "rolled_back"], "some": ["done", "invalid"],
                 "fine": ["done", "skipped"], "none": ["cancelled"],
                 "in-flight": ["rolled_back", "awaiting_boot", "cancelled"]}
        with db.write_conn() as conn:
            for mid, machine_steps in steps.items():
                halted = mid == "in-flight"
                conn.execute(sqlalchemy.text(  # the columns of revision 0006
                    "INSERT INTO migrations (id, state, target_boot_interface, selector, "
                    "options, total, created_at, finished_at) VALUES (:id, :state, 'x', "
                    "'{}', '{}', :total, '2026-12-01 00:00:00', :finished)"), {
                    "id": mid, "state": "halted" if halted else "done",
                    "total": len(machine_steps),
                    "finished": None if halted else "2026-12-01 00:01:00"})
                conn.execute(models.MigrationMachine.__table__.insert(), [
                    {"migration_id": mid, "machine_id": f"{mid}-{n}", "position": n,
                     "source_boot_interface": "pxe", "state": step}
                    for n, step in enumerate(machine_steps)])
        db.upgrade()
        with db.read_conn() as conn:
            got = {r.id: (r.state, r.result) for r in conn.exec_driver_sql(
                "SELECT id, state, result FROM migrations")}
        assert got == {"all-failed": ("done", "failed"), "some": ("done", "partially_failed"),
                       "fine": ("done", "succeeded"), "none": ("done", "not_run"),
                       "in-flight": ("halting", None)}
        with db.write_engine.connect() as connection:
            alembic.command.downgrade(db.alembic_config(connection), "0006")
            connection.commit()
        with db.read_conn() as conn:
            assert conn.exec_driver_sql("SELECT state FROM migrations WHERE id = 'in-flight'"
                                        ).scalar() == "halted"
            assert conn.exec_driver_sql("SELECT count(*) FROM migration_machines").scalar() == 10
        db.upgrade()
    finally:
        db.dispose()
