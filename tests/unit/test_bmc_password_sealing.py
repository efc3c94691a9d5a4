"""BMC passwords at rest: sealed with the key file, never readable from the
database alone; the key file, its rotation and the revision that seals old rows."""

import os
import sqlite3
import stat
import subprocess
import sys

import pytest
import sqlalchemy
from cryptography.fernet import Fernet, InvalidToken

from metalboot_framework.store import models, password_key
from metalboot_framework.store.db import Database
from tests.conftest import USE_POSTGRES, machine_body

PASSWORDS = [f"bmc-secret-{n}" for n in range(1, 6)]


def stored_passwords(services):
    with services.db.read_conn() as conn:
        return dict(conn.execute(sqlalchemy.select(models.Machine.id,
                                                   models.Machine.bmc_password)).all())


def database_bytes(state):
    """Everything SQLite wrote: the database, its WAL and shared memory."""
    return b"".join(path.read_bytes() for path in state.iterdir()
                    if path.name.startswith("metalboot.sqlite"))


def key_file(conf):
    return conf.database.bmc_password_key_file


def dbsync(conf, tmp_path, *args):
    """metalboot-dbsync as an operator runs it, with the test's database."""
    conf_file = tmp_path / "dbsync.conf"
    conf_file.write_text(f"[DEFAULT]\nstate_path = {conf.state_path}\n[database]\n"
                         f"connection = {conf.database.connection}\n")
    return subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.dbsync",
                           "--config-file", str(conf_file), *args],
                          capture_output=True, text=True, timeout=120)


def register(api):
    for n in range(1, 6):
        assert api.post("/v1/machines", json=machine_body(n)).status_code == 201


def test_a_database_dump_reveals_no_password(api, partition, services, conf, tmp_path):
    register(api)
    r = api.patch(f"/v1/machines/{machine_body(5)['id']}",
                  json={"bmc": {"password": "patched-secret"}})
    assert r.status_code == 200 and r.json["bmc"]["password_set"] is True
    rows = stored_passwords(services)
    for password in PASSWORDS[:4] + ["patched-secret"]:
        assert all(password not in row for row in rows.values())
    if not USE_POSTGRES:
        raw = database_bytes(tmp_path / "state")
        with sqlite3.connect(tmp_path / "state" / "metalboot.sqlite") as db:
            dump = "\n".join(db.iterdump())
        for password in PASSWORDS[:4] + ["patched-secret"]:
            assert password.encode() not in raw
            assert password not in dump
    # what the plugins get is the password itself
    assert services.task(machine_body(1)["id"], "fake").machine.bmc.password == PASSWORDS[0]
    assert services.task(machine_body(5)["id"], "fake").machine.bmc.password == "patched-secret"
    # the key file: created at the first start, for its owner only
    assert stat.S_IMODE(os.stat(key_file(conf)).st_mode) == 0o600


def test_a_snapshot_opens_the_password_only_when_read(api, partition, services):
    """The boot server reads many machines and no password: it opens none."""
    register(api)
    opened = []
    real_open = services.password_key.open
    services.password_key.open = lambda sealed: opened.append(sealed) or real_open(sealed)
    task = services.task(machine_body(2)["id"], "fake")
    assert task.machine.id == machine_body(2)["id"] and opened == []
    assert "bmc-secret" not in repr(task.machine)
    assert task.machine.bmc.password == PASSWORDS[1] and len(opened) == 1


def test_start_refuses_a_key_file_that_is_not_the_databases(api, partition, services, conf):
    from metalboot_framework.services import Services
    register(api)
    path = key_file(conf)
    original = open(path).read()
    with open(path, "w") as f:
        f.write(Fernet.generate_key().decode() + "\n")
    with pytest.raises(password_key.PasswordKeyError, match="does not open the database"):
        Services.from_conf(conf)
    # a lost key file is not silently replaced by a new one
    os.unlink(path)
    with pytest.raises(password_key.PasswordKeyError, match="is missing"):
        Services.from_conf(conf)
    assert not os.path.exists(path)
    with open(path, "w") as f:
        f.write(original)
    Services.from_conf(conf).db.dispose()


def test_rotate_key_seals_every_row_with_a_new_key(api, partition, services, conf, tmp_path):
    register(api)
    path = key_file(conf)
    old_key = open(path).read().split()[-1]
    before = stored_passwords(services)

    result = dbsync(conf, tmp_path, "rotate-key")
    assert result.returncode == 0, result.stderr
    assert "sealed 5 BMC password(s)" in result.stdout

    keys = [line for line in open(path).read().splitlines() if not line.startswith("#")]
    assert len(keys) == 1 and keys[0] != old_key
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    after = stored_passwords(services)
    for machine_id, sealed in after.items():
        assert sealed != before[machine_id]
        with pytest.raises(InvalidToken):
            Fernet(old_key).decrypt(sealed)
        assert Fernet(keys[0]).decrypt(sealed).decode().startswith("bmc-secret-")
    # a server running through the rotation reads the new key when it meets it ...
    assert services.task(machine_body(3)["id"], "fake").machine.bmc.password == PASSWORDS[2]
    # ... and seals with it
    assert api.patch(f"/v1/machines/{machine_body(3)['id']}",
                     json={"bmc": {"password": "after-rotation"}}).status_code == 200
    sealed = stored_passwords(services)[machine_body(3)["id"]]
    assert Fernet(keys[0]).decrypt(sealed) == b"after-rotation"


def test_an_interrupted_rotation_loses_no_password(api, partition, services, conf, tmp_path,
                                                   monkeypatch):
    register(api)
    path = key_file(conf)
    calls = []
    real_batch = password_key._seal_batch

    def dies_after_one_batch(conn, key, after):
        calls.append(after)
        if len(calls) > 1:
            raise RuntimeError("killed")
        return real_batch(conn, key, after)

    monkeypatch.setattr(password_key, "_BATCH", 2)
    monkeypatch.setattr(password_key, "_seal_batch", dies_after_one_batch)
    key = password_key.PasswordKey(path)
    with pytest.raises(RuntimeError, match="killed"):
        password_key.rotate(key, services.db)
    monkeypatch.undo()

    # both keys are in the file: rows of either are readable by any process
    assert password_key.PasswordKey(path).key_count == 2
    fresh = password_key.PasswordKey(path)
    rows = stored_passwords(services)
    assert sorted(fresh.open(v) for v in rows.values()) == sorted(PASSWORDS)
    newest = [line for line in open(path).read().splitlines() if not line.startswith("#")][0]
    assert sum(fresh.opens_with_newest(v) for v in rows.values()) == 2  # the first batch

    result = dbsync(conf, tmp_path, "rotate-key")  # run again: finishes
    assert result.returncode == 0, result.stderr
    final = password_key.PasswordKey(path)
    assert final.key_count == 1 and open(path).read().find(newest) == -1
    assert sorted(final.open(v) for v in stored_passwords(services).values()) == sorted(PASSWORDS)


def older_database(conf, password):
    """A database at revision 0006 (before passwords were sealed) with one
    machine whose password is stored as it was then: plain."""
    db = Database(conf.database.connection)
    db.upgrade("0006")
    with db.write_conn() as conn:
        conn.execute(models.Partition.__table__.insert().values(
            id="p1", description="", cmdline="", properties={}, created_at=models.utcnow()))
        conn.execute(sqlalchemy.table(
            "machines", *(sqlalchemy.column(c) for c in (
                "id", "partition_id", "bmc_address", "bmc_username", "bmc_password",
                "bmc_verify_tls", "boot_interface", "boot_mode", "state", "properties",
                "token_generation", "created_at"))).insert().values(
            id="m1", partition_id="p1", bmc_address="h", bmc_username="root",
            bmc_password=password, bmc_verify_tls=True, boot_interface="fake",
            boot_mode="uefi", state="ready", properties="{}", token_generation=1,
            created_at=models.utcnow()))
    return db


@pytest.mark.skipif(USE_POSTGRES, reason="reads the SQLite files")
def test_dbsync_seals_the_plain_passwords_of_an_older_database(conf, tmp_path):
    older_database(conf, "plain-old-secret").dispose()
    assert b"plain-old-secret" in database_bytes(tmp_path / "state")

    result = dbsync(conf, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "database at revision 0010" in result.stdout  # the head

    db = Database(conf.database.connection)
    with db.read_conn() as conn:
        sealed = conn.exec_driver_sql("SELECT bmc_password FROM machines").scalar()
    db.dispose()
    assert sealed != "plain-old-secret"
    assert password_key.PasswordKey(key_file(conf)).open(sealed) == "plain-old-secret"
    with sqlite3.connect(tmp_path / "state" / "metalboot.sqlite") as raw:
        assert "plain-old-secret" not in "\n".join(raw.iterdump())
    assert b"plain-old-secret" not in database_bytes(tmp_path / "state")


def test_an_upgrade_without_the_key_refuses_to_leave_passwords_plain(conf):
    db = older_database(conf, "plain-old-secret")
    with pytest.raises(RuntimeError, match="need the key file"):
        db.upgrade()
    assert db.current_revision() == "0007"  # the revision before the sealing
    db.dispose()
