"""What metal-api does: call metalboot through a client generated from the served
OpenAPI document. openapi-python-client (a real generator, as oapi-codegen is for
Go) generates the client; the test drives the main flow through its typed
methods against a real metalboot-server and decodes every answer, errors
included, as the types the document names."""

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from metalboot_framework.testing.simulator import SILENT, SimulatedFleet
from tests.conftest import ADMIN

pytestmark = pytest.mark.functional

PACKAGE = "metalboot_generated_client"


@pytest.fixture
def server(server_factory):
    return server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()


@pytest.fixture
def generated(server, tmp_path):
    """The client package generated from the document the server serves."""
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(requests.get(server.url + "/v1/openapi.json",
                                                timeout=30).json()))
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run: the code is only imported
    generator = Path(sys.executable).with_name("openapi-python-client")
    run = subprocess.run([str(generator), "generate", "--path", str(document), "--meta", "none",
                          "--output-path", str(tmp_path / PACKAGE), "--config", str(config),
                          "--fail-on-warning"], capture_output=True, text=True, timeout=300)
    # every schema and operation translated: no warning, no skipped endpoint
    assert run.returncode == 0, run.stdout + run.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


class _Api:
    """The generated operations of a tag: ``_Api("machines").list_machines``."""

    def __init__(self, tag):
        self.tag = tag

    def __getattr__(self, operation):
        return importlib.import_module(f"{PACKAGE}.api.{self.tag}.{operation}")


def _machine_id(n):
    return f"00000000-0000-4000-8000-{n:012x}"


def test_main_flow_through_a_generated_client(server, generated):
    _main_flow(server, generated)


GO_CHECK = Path(__file__).resolve().parents[1] / "go" / "openapi_check" / "main.go"


@pytest.mark.skipif(shutil.which("go") is None, reason="needs Go (Debian: golang-go, "
                                                       "golang-github-getkin-kin-openapi-dev)")
def test_go_reading_of_the_document_and_the_exchanges(server, generated, api_contract,
                                                      tmp_path):
    """metal-api is a Go program: kin-openapi (as Debian packages it, in GOPATH
    mode) loads and validates the served document, and validates every request
    and answer of the main flow against it (tests/go/openapi_check)."""
    _main_flow(server, generated)
    exchanges = [e.as_json() for e in api_contract.exchanges if e.base == server.url]
    assert len(exchanges) > 30 and {e["status"] for e in exchanges} >= {200, 201, 202, 409,
                                                                         422}
    (tmp_path / "exchanges.json").write_text(json.dumps(exchanges))
    (tmp_path / "openapi.json").write_text(json.dumps(
        requests.get(server.url + "/v1/openapi.json", timeout=30).json()))
    env = dict(os.environ, GOPATH="/usr/share/gocode", GO111MODULE="off", GOFLAGS="")
    run = subprocess.run(["go", "run", str(GO_CHECK), str(tmp_path / "openapi.json"),
                          str(tmp_path / "exchanges.json")], capture_output=True, text=True,
                         timeout=600, env=env, cwd=GO_CHECK.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{len(exchanges)} exchanges" in run.stdout and "0 failures" in run.stdout


def _main_flow(server, generated):
    models = importlib.import_module(f"{PACKAGE}.models")
    partitions = _Api("partitions")
    machines = _Api("machines")
    migrations = _Api("migrations")
    events = _Api("events")
    client = generated.AuthenticatedClient(base_url=server.url, token=ADMIN,
                                           raise_on_unexpected_status=True)

    # a partition
    r = partitions.create_partition.sync_detailed(client=client, body=models.PartitionCreate(
        id="p1", boot=models.BootConfig(kernel_url="http://images.example/vmlinuz",
                                        cmdline="console=ttyS0")))
    assert r.status_code == 201 and isinstance(r.parsed, models.Partition)
    assert r.parsed.boot.cmdline == "console=ttyS0" and r.parsed.machine_count == 0
    assert r.headers["Location"] == "/v1/partitions/p1"

    # a list of machines, then one: the same typed method, each answer decoded
    r = machines.create_machines.sync_detailed(client=client, body=[
        models.MachineCreate(id=_machine_id(n), partition="p1",
                             nics=[models.Nic(mac=f"52:54:00:00:00:{n:02x}")])
        for n in range(1, 4)])
    assert r.status_code == 201 and isinstance(r.parsed, models.MachineCreated), r.content
    assert r.parsed.count == 3
    assert [m.id for m in r.parsed.machines] == [_machine_id(n) for n in range(1, 4)]
    r = machines.create_machines.sync_detailed(client=client, body=models.MachineCreate(
        id=_machine_id(4), partition="p1", nics=[models.Nic(mac="52:54:00:00:00:04")],
        bmc=models.BmcIn(address="127.0.0.1:8000", username="root", password="secret")))
    assert r.status_code == 201 and isinstance(r.parsed, models.Machine), r.content
    assert r.parsed.id == _machine_id(4) and r.parsed.bmc.password_set is True
    assert r.parsed.nics[0].mac == "52:54:00:00:00:04" and r.parsed.lock is None
    assert r.parsed.created_at.tzinfo is not None  # a date-time, decoded
    assert r.headers["Location"] == f"/v1/machines/{_machine_id(4)}"

    # paging
    seen, marker = [], generated.types.UNSET
    while True:
        page = machines.list_machines.sync(client=client, limit=3, marker=marker)
        assert isinstance(page, models.MachineList)
        seen += [m.id for m in page.machines]
        if page.next_marker is None:
            break
        marker = page.next_marker
    assert seen == [_machine_id(n) for n in range(1, 5)]
    server.wait_enrolled()

    # a 409 and a 422, decoded as Error with the fields named
    r = partitions.create_partition.sync_detailed(client=client,
                                                  body=models.PartitionCreate(id="p1"))
    assert r.status_code == 409 and isinstance(r.parsed, models.Error)
    assert r.parsed.error.code == 409 and r.parsed.error.fields["id"] == ["exists already"]
    r = machines.create_machines.sync_detailed(client=client, body=models.MachineCreate(
        id="not-a-uuid", partition="p1"))
    assert r.status_code == 422 and isinstance(r.parsed, models.Error)
    assert r.parsed.error.fields["id"] == ["Not a valid UUID."]

    # a migration that runs to the end
    # (the fleet follows the event feed from where it starts: started first,
    # it sees the activations however soon the conductor gets to them)
    ids = [_machine_id(n) for n in range(1, 5)]
    with SimulatedFleet(server.url, server.token):
        r = migrations.create_migration.sync_detailed(client=client, body=models.MigrationCreate(
            selector=models.Selector(machines=ids[:2]), boot_interface="fake-alt",
            max_parallel=2, max_failures="50%"))
        assert r.status_code == 202 and isinstance(r.parsed, models.Migration), r.content
        first = r.parsed
        assert first.total == 2 and first.options.max_failures.percent == 50.0
        assert r.headers["Location"] == f"/v1/migrations/{first.id}"
        done = _wait(lambda: migrations.get_migration.sync(client=client,
                                                           migration_id=first.id),
                     lambda m: m.finished_at is not None)
    assert done.state == "done" and done.progress == 1.0
    page = migrations.list_migration_machines.sync(client=client, migration_id=first.id)
    assert [m.state for m in page.machines] == ["done", "done"]
    assert all(m.evidence.kind == "fetch" for m in page.machines)

    # pause, resume, cancel: machines that never boot keep the migration busy
    with SimulatedFleet(server.url, server.token, default=SILENT):
        r = migrations.create_migration.sync_detailed(client=client, body=models.MigrationCreate(
            selector=models.Selector(partition="p1", boot_interface="fake"),
            boot_interface="fake-alt", max_parallel=1, boot_timeout=600))
        assert r.status_code == 202 and r.parsed.total == 2, r.content
        second = r.parsed
        assert migrations.pause_migration.sync(client=client,
                                               migration_id=second.id).state == "paused"
        assert migrations.resume_migration.sync(client=client,
                                                migration_id=second.id).state == "running"
        assert migrations.cancel_migration.sync(client=client,
                                                migration_id=second.id).state == "cancelling"
        cancelled = _wait(lambda: migrations.get_migration.sync(client=client,
                                                                migration_id=second.id),
                          lambda m: m.finished_at is not None)
    assert cancelled.state == "cancelled"
    r = migrations.cancel_migration.sync_detailed(client=client, migration_id=second.id)
    assert r.status_code == 409 and r.parsed.error.code == 409

    # every event once, by cursor
    cursor, feed = 0, []
    while True:
        page = events.list_events.sync(client=client, since=cursor, limit=7)
        if not page.events:
            break
        feed += page.events
        cursor = page.next_cursor
    assert [e.id for e in feed] == sorted({e.id for e in feed})
    kinds = {e.kind for e in feed}
    assert {"partition.created", "machine.registered", "migration.created"} <= kinds, kinds
    assert {e.migration_id for e in feed} >= {first.id, second.id}
    history = machines.list_machine_events.sync(client=client, machine_id=ids[0])
    assert [e.id for e in history.events] == [e.id for e in feed if e.machine_id == ids[0]]


def _wait(read, done, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.1)
