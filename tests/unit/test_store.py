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


def test_downgrade_keeps_machines_and_nics(tmp_path, database_url):
    """Downgrades that drop machine columns must not copy the machines table:
    on SQLite dropping the old copy deleted every NIC (ON DELETE CASCADE)."""
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
