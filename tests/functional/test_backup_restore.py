"""Backup and restore as doc/deployment.rst says: ``pg_dump`` of a running
server's PostgreSQL database and ``pg_restore`` into a new one; the
``sqlite3`` shell's online ``.backup`` of a running server's SQLite file. A
server on the restored database has every machine, migration, event and
piece of evidence, and the per-machine URLs it gave out before still work
(the secret that signs their tokens is in the database). The BMC password key
file is part of the backup: without it the restored server refuses to start,
with it it opens the passwords again."""

import shutil
import subprocess

import pytest
import requests

from metalboot_framework.testing.simulator import SimulatedFleet
from tests.conftest import signer_of
from tests.functional.test_migrations import all_events, migrate, setup_machines, wait_for
from tests.pgserver import _bin

pytestmark = pytest.mark.functional

CONF = "enabled_boot_interfaces = fake,fake-alt\n"


def paged(server, path, key):
    out, marker = [], None
    while True:
        params = {"limit": 1000, **({"marker": marker} if marker else {})}
        page = server.request("GET", path, params=params).json()
        out += page[key]
        marker = page.get("next_marker")
        if not marker:
            return out


def everything(server, migration_id, ids):
    """What a restore must bring back, as the API shows it."""
    return {
        "machines": paged(server, "/v1/machines", "machines"),
        "migration": server.request("GET", f"/v1/migrations/{migration_id}").json(),
        "migration machines": paged(server, f"/v1/migrations/{migration_id}/machines",
                                    "machines"),
        "events": all_events(server),
        "evidence": {mid: server.request("GET", f"/v1/machines/{mid}/evidence").json()
                     for mid in ids},
    }


def a_state_worth_keeping(server):
    ids = setup_machines(server, 12)
    with SimulatedFleet(server.url, server.token, only_interfaces=["fake-alt"]):
        m = migrate(server, ids[:8], max_parallel=4)
        assert wait_for(server, m["id"])["counts"] == {"done": 8}
    return ids, m["id"], everything(server, m["id"], ids)


def boot_url(server, signer, machine_id):
    token = signer.machine_token(machine_id, 1, "fake-alt")
    return f"{server.url}/boot/{machine_id}/fake-alt/{token}/boot.ipxe"


def start_with_the_backups_key(restored, original):
    """The restored database alone does not start (its BMC passwords are sealed
    with a key it does not have); with the key file of the backup it does."""
    restored.start(wait=False)
    assert restored.proc.wait(timeout=60) != 0
    assert "key file" in restored.log() and "is missing" in restored.log()
    shutil.copy(original.key_file, restored.key_file)
    restored.start()


def check_restored(restored, ids, migration_id, before, signer):
    assert everything(restored, migration_id, ids) == before
    # the token a machine was given before the backup still opens its boot script
    r = requests.get(boot_url(restored, signer, ids[0]), timeout=30)
    assert r.status_code == 200, r.text
    assert len(restored.request("GET", f"/v1/machines/{ids[0]}/evidence").json()[
        "evidence"]) == len(before["evidence"][ids[0]]["evidence"]) + 1


def test_pg_dump_of_a_running_server_and_pg_restore(server_factory, postgres, tmp_path):
    url = postgres.create_database()
    server = server_factory(database_url=url, extra_conf=CONF).start()
    ids, migration_id, before = a_state_worth_keeping(server)
    signer = signer_of(server)
    dump = tmp_path / "metalboot.dump"
    out = subprocess.run([_bin("pg_dump"), "-Fc", "-h", "127.0.0.1", "-p", str(postgres.port),
                          "-U", "postgres", "-d", url.rsplit("/", 1)[1], "-f", str(dump)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    server.stop()
    new_url = postgres.create_database()
    out = subprocess.run([_bin("pg_restore"), "--no-owner", "-h", "127.0.0.1", "-p",
                          str(postgres.port), "-U", "postgres", "-d",
                          new_url.rsplit("/", 1)[1], str(dump)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    restored = server_factory(database_url=new_url, extra_conf=CONF,
                              key_file=tmp_path / "restored.key")
    start_with_the_backups_key(restored, server)
    check_restored(restored, ids, migration_id, before, signer)


def test_sqlite_online_backup_of_a_running_server(server_factory, tmp_path):
    sqlite3 = shutil.which("sqlite3")
    if sqlite3 is None:  # a failure, not a skip: CI installs it
        pytest.fail("the sqlite3 shell is not installed (apt-get install sqlite3)")
    server = server_factory(database_url=None, extra_conf=CONF).start()
    ids, migration_id, before = a_state_worth_keeping(server)
    signer = signer_of(server)
    backup = tmp_path / "backup.sqlite"
    out = subprocess.run([sqlite3, str(server.state / "metalboot.sqlite"),
                          f".backup '{backup}'"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    server.stop()
    restored = server_factory(database_url=None, extra_conf=CONF,
                              key_file=tmp_path / "restored.key")
    restored.state.mkdir()
    shutil.copy(backup, restored.state / "metalboot.sqlite")
    start_with_the_backups_key(restored, server)
    check_restored(restored, ids, migration_id, before, signer)
