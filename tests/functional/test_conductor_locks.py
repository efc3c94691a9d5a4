"""A lock the conductor could not release is not held until it restarts."""

import datetime
import time

import pytest
from sqlalchemy import update

from metalboot_framework.store import models
from metalboot_framework.store.db import Database
from tests.conftest import machine_body

pytestmark = pytest.mark.functional


def test_a_leaked_lock_of_a_live_conductor_is_released(server_factory):
    server = server_factory(extra_conf="host = conductor-x\n"
                                       "[conductor]\nheartbeat_interval = 1\n").start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    machine_id = server.register_enrolled([machine_body(1)])[0]
    # what a worker leaves when the database was away as it released the machine
    db = Database(server.database_url or f"sqlite:///{server.state}/metalboot.sqlite")
    old = models.utcnow() - datetime.timedelta(seconds=30)
    with db.write() as s:
        s.execute(update(models.Machine).where(models.Machine.id == machine_id)
                  .values(reservation="conductor-x", reserved_at=old))
    db.dispose()
    locked = server.request("PATCH", f"/v1/machines/{machine_id}",
                            json={"properties": {"rack": "r1"}})
    assert locked.status_code == 409, locked.text
    assert "conductor-x" in locked.json()["error"]["message"]

    deadline = time.monotonic() + 15
    while server.request("GET", f"/v1/machines/{machine_id}").json()["lock"] is not None:
        assert time.monotonic() < deadline, "the leaked lock was never released"
        time.sleep(0.2)
    r = server.request("PATCH", f"/v1/machines/{machine_id}", json={"properties": {"rack": "r1"}})
    assert r.status_code == 200, r.text
    assert "released 1 lock(s) of conductor-x on machines none of its workers runs" in \
        server.log()
