"""metalboot-boot-server, the asyncio artifact server, next to a metalboot-server
on the same database: the same answers as the Flask blueprint, evidence for
every answered fetch (group-committed, flushed at SIGTERM), a migration that
finishes when simulated machines fetch from it, and, at the HTTP level where its
own dispatch and file path stand in for a router and a file response:
which paths and methods reach which answer, a whole image to a slow reader (in
chunks, each sent when the connection takes it), pipelined requests answered
in order, HEAD, Expect: 100-continue, bodies too large."""

import asyncio
import concurrent.futures
import fcntl
import itertools
import os
import re
import signal
import socket
import threading
import time

import pytest
import requests
import sqlalchemy
from werkzeug.exceptions import NotFound

from benchmarks.common import partition_iso
from metalboot_framework.store import models
from metalboot_framework.store.db import Database
from metalboot_framework.testing.simulator import FETCH, SimulatedFleet
from tests.conftest import READER, ServerProcess, free_port, machine_body, signer_of
from tests.functional.test_migrations import migrate, setup_machines, wait_for

pytestmark = pytest.mark.functional

FAKE = "fake"  # machine tokens are bound to an interface
ISO_IFACE = "redfish-virtual-media-ipxe"
IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")
# Headers both servers must send alike (Date, Server and X-Request-Id differ).
COMPARED = ("Content-Type", "Content-Length", "ETag", "Accept-Ranges", "Content-Range",
            "Cache-Control", "Content-Disposition", "Last-Modified", "WWW-Authenticate")


class BootServerProcess(ServerProcess):
    """metalboot-boot-server reading the configuration file of ``api_server``."""

    def __init__(self, api_server, port):
        path = api_server.tmp_path.parent / f"boot-server-{port}"
        for n in itertools.count(1):  # a second one on the same port: its own log
            if not path.exists():
                break
            path = api_server.tmp_path.parent / f"boot-server-{port}-{n}"
        path.mkdir()
        super().__init__(path, database_url=api_server.database_url,
                         command="metalboot_framework.cmd.boot_server")
        self.conf_path = api_server.conf_path
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"boot server exited with {self.proc.returncode}:\n"
                                   f"{self.log()}")
            try:
                requests.get(self.url + "/", timeout=5)
                return
            except requests.RequestException:
                time.sleep(0.05)
        raise RuntimeError(f"boot server not ready after {timeout}s:\n{self.log()}")


def _conf(boot_port, public=True, extra=""):
    return (f"enabled_boot_interfaces = fake,fake-alt,{ISO_IFACE}\n"
            f"[redfish]\nipxe_efi_path = {IPXE_EFI}\n"
            f"[boot_server]\nhost_ip = 127.0.0.1\nport = {boot_port}\n{extra}"
            + (f"[api]\npublic_url = http://127.0.0.1:{boot_port}\n" if public else ""))


@pytest.fixture
def boot_pair(server_factory):
    """start(...) -> (metalboot-server, metalboot-boot-server) on one database."""
    started = []

    def start(public=True, extra=""):
        port = free_port()
        api = server_factory(extra_conf=_conf(port, public, extra)).start()
        boot = BootServerProcess(api, port).start()
        started.append(boot)
        return api, boot

    yield start
    for boot in started:
        boot.stop()


def register(api, count, partition="p1", start=0):
    if start == 0:
        r = api.request("POST", "/v1/partitions", json={"id": partition, "boot": {
            "kernel_url": "http://images.example/metal-hammer/vmlinuz",
            "initrd_url": "http://images.example/metal-hammer/initrd.img",
            "cmdline": "console=ttyS0", "metal_hammer_version": "v0.13.0"}})
        assert r.status_code == 201, r.text
    bodies = [machine_body(i, partition=partition) for i in range(start, start + count)]
    r = api.request("POST", "/v1/machines", json=bodies)
    assert r.status_code == 201, r.text
    return [b["id"] for b in bodies]


def evidence(server):
    db = Database(server.database_url or f"sqlite:///{server.state}/metalboot.sqlite")
    try:
        with db.read() as s:
            return list(s.scalars(sqlalchemy.select(models.BootEvidence)
                                  .order_by(models.BootEvidence.id)))
    finally:
        db.dispose()


def _answer(r):
    return r.status_code, r.content, {h: r.headers.get(h) for h in COMPARED}


def test_same_answers_as_flask(boot_pair):
    api, boot = boot_pair(public=False)
    ids = register(api, 3)
    signer = signer_of(api)
    mid, token = ids[0], signer.machine_token(ids[0], 1, FAKE)
    script = f"/boot/{mid}/fake/{token}/boot.ipxe"
    iso_url, iso_path = partition_iso(api, "p1", ISO_IFACE)
    iso = iso_url.split(api.url, 1)[1]
    etag = requests.get(api.url + script).headers["ETag"]
    iso_etag = requests.get(api.url + iso).headers["ETag"]
    cases = [
        (script, {}), (script, {"Range": "bytes=0-5"}), (script, {"Range": "bytes=-5"}),
        (script, {"Range": "bytes=5000-6000"}), (script, {"Range": "bytes=0-1,4-5"}),
        (script, {"If-None-Match": etag}), (script, {"Range": "bytes=0-5", "If-Range": etag}),
        (script, {"Range": "bytes=0-5", "If-Range": '"other"'}),
        (script, {"If-Match": '"other"'}), (script, {"Range": "bytes=9999-"}),
        (f"/boot/{mid}/fake/{'0' * 32}/boot.ipxe", {}),
        (f"/boot/{mid}/pxe/{token}/boot.ipxe", {}),
        (f"/boot/{mid}/fake/{token}/other.efi", {}),
        (f"/boot/00000000-0000-0000-0000-000000000000/fake/{token}/boot.ipxe", {}),
        ("/boot/mac/52-54-00-00-00-01/fake/boot.ipxe", {}),
        ("/boot/mac/52:54:00:00:00:02/fake/boot.ipxe", {"Range": "bytes=0-5"}),
        ("/boot/mac/52:54:00:00:00:99/fake/boot.ipxe", {}),
        ("/boot/mac/52:54:00:00:00:01/fake-alt/boot.ipxe", {}),
        (iso, {}), (iso, {"Range": "bytes=0-262143"}), (iso, {"Range": "bytes=262144-524287"}),
        (iso, {"Range": "bytes=1000000-"}), (iso, {"Range": "bytes=-70000"}),
        (iso, {"Range": "bytes=999999999-"}), (iso, {"If-None-Match": iso_etag}),
        (iso, {"Range": "bytes=0-9", "If-Range": '"other"'}),
        ("/boot/partitions/nope/redfish-virtual-media-ipxe/" + iso.rsplit("/", 1)[1], {}),
        ("/boot/partitions/p1/redfish-virtual-media-ipxe/other.iso", {}),
        ("/boot/partitions/p1/fake/" + iso.rsplit("/", 1)[1], {}),
        ("/no/such/path", {}),
    ]
    before = len(evidence(api))
    for path, headers in cases:
        flask, aio = (_answer(requests.get(url + path, headers=headers, timeout=30))
                      for url in (api.url, boot.url))
        assert aio == flask, (path, headers)
        for url in (api.url, boot.url):  # HEAD too
            r = requests.head(url + path, headers=headers, timeout=30)
            assert r.status_code == flask[0], (url, path, headers)
    # each server recorded the same fetches: the per-machine answers, 404s excepted
    rows = evidence(api)[before:]
    assert len(rows) % 2 == 0
    flask_rows, aio_rows = rows[0::2], rows[1::2]  # asked one after the other
    fields = ("machine_id", "interface", "kind", "path", "client_address", "data")
    assert [[getattr(e, f) for f in fields] for e in flask_rows] == \
        [[getattr(e, f) for f in fields] for e in aio_rows]
    assert {e.data["range"] for e in aio_rows if e.data and "range" in e.data} == \
        {"bytes=0-5", "bytes=-5"}
    # by MAC from loopback, which the tests' [artifacts] boot_network_prefixes bind
    # (two fetches by MAC, each with GET and HEAD)
    assert [(e.kind, e.data["by_mac"]) for e in aio_rows if e.data and "by_mac" in e.data] \
        == [("fetch", "prefix")] * 4
    with open(iso_path, "rb") as f:
        assert requests.get(boot.url + iso, headers={"Range": "bytes=0-262143"}).content \
            == f.read(262144)


def test_boot_report_same_as_flask(boot_pair):
    api, boot = boot_pair(public=False)
    ids = register(api, 2)
    signer = signer_of(api)
    token, other = signer.machine_token(ids[0], 1, FAKE), signer.machine_token(ids[1], 1, FAKE)
    url = f"/v1/machines/{ids[0]}/boot-report"
    cases = [
        {"data": "x"},
        {"data": "{not json", "headers": {"Content-Type": "application/json"}},
        {"json": ["a list"]},
        {"json": {"boot_interface": "fake", "bogus": 1}},
        {"json": {"boot_interface": "fake\u0000"}},
        {"json": {"boot_interface": "fake"}},
        {"json": {"boot_interface": "fake", "token": "x" * 32}},
        {"json": {"boot_interface": "fake"}, "headers": {"Authorization": f"Bearer {other}"}},
        {"json": {"boot_interface": "nope", "token": token}},
        {"json": {"boot_interface": "fake", "token": token}, "params": {"x": "1"}},
        # bodies no strict JSON parser reads: 400, never a 500 or a stored NaN
        {"data": '{"boot_interface":"fake","token":' + "[" * 50000 + "]" * 50000 + "}",
         "headers": {"Content-Type": "application/json"}},
        {"data": '{"boot_interface":"fake","message":NaN}',
         "headers": {"Content-Type": "application/json"}},
        {"data": "null", "headers": {"Content-Type": "application/json"}},
        # the token is checked before the body: 401, or 403 for an API token
        {"json": {"bogus": 1}},
        {"json": {"bogus": 1}, "headers": {"Authorization": f"Bearer {READER}"}},
        {"json": {"boot_interface": "fake", "token": READER}},
        {"json": {"bogus": 1, "token": token}},
    ]
    for case in cases:
        flask, aio = (_answer(requests.post(u + url, timeout=30, **case))
                      for u in (api.url, boot.url))
        assert aio == flask, case
        assert flask[0] < 500, (case, flask)
    assert [_answer(requests.post(boot.url + url, timeout=30, **case))[0]
            for case in cases[-4:]] == [401, 403, 403, 422]
    assert evidence(api) == []
    answers = [requests.post(u + url, json={"boot_interface": "fake", "message": "up"},
                             headers={"Authorization": f"Bearer {token}"}, timeout=30)
               for u in (api.url, boot.url)]
    assert [r.status_code for r in answers] == [201, 201]
    rows = evidence(api)
    assert [r.json() for r in answers] == [{"machine_id": ids[0], "evidence_id": e.id}
                                           for e in rows]
    assert [(e.kind, e.interface, e.path, e.data) for e in rows] == \
        [("report", "fake", "boot-report", {"message": "up"})] * 2
    # an id in capitals names the same machine (ids are stored in lower case)
    upper = f"/v1/machines/{ids[0].upper()}/boot-report"
    answers = [requests.post(u + upper, json={"boot_interface": "fake", "message": "caps"},
                             headers={"Authorization": f"Bearer {token}"}, timeout=30)
               for u in (api.url, boot.url)]
    assert [(r.status_code, r.json()["machine_id"]) for r in answers] == [(201, ids[0])] * 2
    assert [e.machine_id for e in evidence(api)] == [ids[0]] * 4


def test_iso_in_ranges_and_wrong_tokens(boot_pair):
    api, boot = boot_pair()
    ids = register(api, 2)
    iso_url, iso_path = partition_iso(api, "p1", ISO_IFACE)
    assert iso_url.startswith(boot.url)  # public_url leads machines and BMCs here
    with open(iso_path, "rb") as f:
        data = f.read()
    step, parts = 256 * 1024, []
    for offset in range(0, len(data), step):
        r = requests.get(iso_url, headers={"Range": f"bytes={offset}-{offset + step - 1}"})
        assert r.status_code == 206
        assert r.headers["Content-Range"] == \
            f"bytes {offset}-{min(offset + step, len(data)) - 1}/{len(data)}"
        parts.append(r.content)
    assert b"".join(parts) == data
    for path in (f"/boot/{ids[0]}/fake/{'0' * 32}/boot.ipxe",
                 f"/boot/{ids[0]}/fake/{signer_of(api).machine_token(ids[1], 1, FAKE)}/boot.ipxe"):
        r = requests.get(boot.url + path)
        assert r.status_code == 404
        assert r.json() == {"error": {"code": 404, "message": "no such boot artifact",
                                      "fields": {}}}
    assert evidence(api) == []  # ISO fetches are not evidence, 404s neither


def test_migration_done_when_machines_fetch_from_boot_server(boot_pair):
    api, boot = boot_pair()
    ids = register(api, 6)
    with SimulatedFleet(api.url, api.token, default=FETCH) as fleet:
        r = api.request("POST", "/v1/migrations", json={
            "selector": {"machines": ids}, "boot_interface": "fake-alt", "max_parallel": 3})
        assert r.status_code == 202, r.text
        migration = r.json()["id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = api.request("GET", f"/v1/migrations/{migration}").json()
            if m["state"] == "done" and m["finished_at"]:
                break
            time.sleep(0.1)
        assert m["state"] == "done", m
    assert all(url_status == 200 for *_, url_status in fleet.boots)
    machines = api.request("GET", f"/v1/migrations/{migration}/machines").json()["machines"]
    assert {m["state"] for m in machines} == {"done"}
    assert all(m["evidence"]["interface"] == "fake-alt" for m in machines)
    rows = [e for e in evidence(api) if e.interface == "fake-alt"]
    assert sorted(e.machine_id for e in rows) == sorted(ids)


def test_concurrent_fetches_each_recorded_in_few_transactions(boot_pair):
    api, boot = boot_pair()
    ids = register(api, 200)
    signer = signer_of(api)
    paths = [f"/boot/{mid}/fake/{signer.machine_token(mid, 1, FAKE)}/boot.ipxe" for mid in ids] * 3
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=64))
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        statuses = list(pool.map(lambda p: session.get(boot.url + p, timeout=60).status_code,
                                 paths))
    assert statuses == [200] * len(paths)
    rows = evidence(api)
    assert len(rows) == len(paths)
    assert sorted(e.machine_id for e in rows) == sorted(ids * 3)
    assert boot.stop() == 0
    committed = re.search(r"boot evidence committed: (\d+) rows in (\d+) transactions "
                          r"\((\d+) of them on the event loop\)", boot.log())
    assert committed and int(committed.group(1)) == len(paths)
    assert int(committed.group(2)) < len(paths)  # grouped
    if api.database_url is None:  # SQLite: mostly committed on the event loop
        assert int(committed.group(3)) > 0
    else:  # PostgreSQL: always by the writer thread
        assert int(committed.group(3)) == 0


def test_fetches_wait_for_a_write_lock_held_elsewhere(boot_pair, database_url):
    """While another process writes (here: holds the SQLite write lock), the
    boot server cannot commit on its event loop; its writer thread waits for
    the lock, and no fetch is answered before its evidence is committed."""
    if database_url is not None:
        pytest.skip("SQLite's write lock")
    api, boot = boot_pair()
    ids = register(api, 20)
    signer = signer_of(api)
    assert requests.get(f"{boot.url}/boot/{ids[0]}/fake/{signer.machine_token(ids[0], 1, FAKE)}"
                        "/boot.ipxe", timeout=30).status_code == 200
    lock = os.open(f"{api.state}/metalboot.sqlite.write-lock", os.O_RDWR)
    results = {}
    try:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            futures = {mid: pool.submit(requests.get, f"{boot.url}/boot/{mid}/fake/"
                                        f"{signer.machine_token(mid, 1, FAKE)}/boot.ipxe",
                                        timeout=30) for mid in ids}
            time.sleep(1.0)
            assert not any(f.done() for f in futures.values())  # waiting for the lock
            assert len(evidence(api)) == 1
            fcntl.lockf(lock, fcntl.LOCK_UN)
            results = {mid: f.result().status_code for mid, f in futures.items()}
    finally:
        os.close(lock)
    assert set(results.values()) == {200}
    assert sorted(e.machine_id for e in evidence(api)) == sorted([ids[0]] + ids)


def test_sigterm_commits_queued_evidence(boot_pair):
    # a long batch wait: at SIGTERM, fetches are waiting for their evidence
    api, boot = boot_pair(extra="evidence_batch_wait = 0.8\nshutdown_timeout = 20\n")
    ids = register(api, 40)
    signer = signer_of(api)
    results = []

    def fetch(mid):
        try:
            r = requests.get(f"{boot.url}/boot/{mid}/fake/{signer.machine_token(mid, 1, FAKE)}"
                             "/boot.ipxe", timeout=30)
            results.append((mid, r.status_code))
        except requests.RequestException:
            results.append((mid, None))

    threads = [threading.Thread(target=fetch, args=(mid,)) for mid in ids]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert boot.stop(signal.SIGTERM) == 0
    for t in threads:
        t.join(30)
    answered = sorted(mid for mid, status in results if status == 200)
    assert answered, results
    recorded = sorted(e.machine_id for e in evidence(api))
    assert recorded == answered
    assert "received SIGTERM" in boot.log()


def test_workers_share_the_port_and_stop_together(boot_pair):
    api, boot = boot_pair(extra="workers = 2\n")
    ids = register(api, 50)
    signer = signer_of(api)
    with open(f"/proc/{boot.proc.pid}/task/{boot.proc.pid}/children") as f:
        workers = [int(p) for p in f.read().split()]
    assert len(workers) == 2
    # the server answered once one worker listened: wait for the other (on a
    # busy host it may still be starting, and the first would take every
    # connection)
    deadline = time.monotonic() + 30
    while boot.log().count("metalboot-boot-server listening on") < 2:
        assert time.monotonic() < deadline, boot.log()
        time.sleep(0.05)
    # new connections each time: the kernel spreads them over both listeners
    paths = [f"/boot/{mid}/fake/{signer.machine_token(mid, 1, FAKE)}/boot.ipxe" for mid in ids] * 4
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda p: requests.get(
            boot.url + p, timeout=60, headers={"Connection": "close"}).status_code, paths))
    assert statuses == [200] * len(paths)
    assert len(evidence(api)) == len(paths)
    assert boot.stop(signal.SIGTERM) == 0
    assert not any(os.path.exists(f"/proc/{pid}") for pid in workers)
    committed = [int(n) for n in re.findall(
        r"boot evidence committed: (\d+) rows in \d+ transactions", boot.log())]
    assert len(committed) == 2 and sum(committed) == len(paths)
    assert all(committed), committed  # both served


def test_expired_machines_kept_unless_changed(boot_pair):
    """After ``cache_ttl`` a machine is checked by its revisions: unchanged ones
    are not read again (the count at stop says so), and a change through the
    API (a partition's cmdline, a deleted machine) is served after one TTL."""
    api, boot = boot_pair(extra="cache_ttl = 0.2\n")
    ids = register(api, 3)
    api.wait_enrolled()  # enrolment changes the machines: done before the first fetch
    signer = signer_of(api)
    urls = {m: f"{boot.url}/boot/{m}/fake/{signer.machine_token(m, 1, FAKE)}/boot.ipxe"
            for m in ids}

    def fetch_all():
        return {m: requests.get(u, timeout=30) for m, u in urls.items()}

    first = fetch_all()
    assert all(r.status_code == 200 and "console=ttyS0 " in r.text for r in first.values())
    for _ in range(3):  # expired each time, unchanged: kept
        time.sleep(0.3)
        assert {m: r.content for m, r in fetch_all().items()} == \
            {m: r.content for m, r in first.items()}
    r = api.request("PATCH", "/v1/partitions/p1", json={"boot": {"cmdline": "console=ttyS1"}})
    assert r.status_code == 200, r.text
    r = api.request("DELETE", f"/v1/machines/{ids[2]}?force=true")
    assert r.status_code == 204, r.text
    time.sleep(0.3)
    after = fetch_all()
    assert after[ids[2]].status_code == 404
    assert all(after[m].status_code == 200 and "console=ttyS1 " in after[m].text
               for m in ids[:2])
    assert boot.stop(signal.SIGTERM) == 0
    read, kept, _ = _snapshot_counts(boot)
    # 3 first reads + 2 after the partition changed; the rest kept (by the
    # background refresh or when a fetch found them expired)
    assert read == 5 and kept >= 9, boot.log()


def _snapshot_counts(boot):
    """(read, kept, loaded before a fetch asked) from the boot server's log at stop."""
    return tuple(map(int, re.search(
        r"machine snapshots: (\d+) read from the database, (\d+) kept after their "
        r"revisions were checked; (\d+) loaded before a fetch asked", boot.log()).groups()))


@pytest.mark.parametrize("warm_interval", [0.05, 0])
def test_snapshots_of_machines_about_to_boot_are_loaded_before_their_fetch(
        boot_pair, warm_interval):
    """The machines a migration prepares or activates are read before they
    fetch their boot.ipxe (each once); with ``warm_interval = 0`` their fetches
    read them. Either way every fetch is answered and the migration is done."""
    api, boot = boot_pair(extra=f"warm_interval = {warm_interval}\n")
    # slow BMCs: a prepare and an activate take 0.3 s each, several looks
    ids = setup_machines(api, 4, properties={"fake_delay": 0.3})
    with SimulatedFleet(api.url, api.token, default=FETCH) as fleet:
        m = wait_for(api, migrate(api, ids, max_parallel=4)["id"])
    assert m["state"] == "done" and m["counts"] == {"done": 4}, m
    assert sorted((mid, iface, status) for mid, iface, _, status in fleet.boots) == \
        [(mid, "fake-alt", 200) for mid in ids]
    assert boot.stop(signal.SIGTERM) == 0
    read, _, warmed = _snapshot_counts(boot)
    assert read == 4, boot.log()
    assert warmed == (4 if warm_interval else 0), boot.log()


def test_machine_registered_again_is_not_its_old_snapshot(boot_pair):
    """A machine deleted and registered again under the same id starts its
    revisions over; its creation time tells the two apart, so the boot server
    does not keep the old one's snapshot (here: the old partition's cmdline)."""
    api, boot = boot_pair(extra="cache_ttl = 0.2\n")
    ids = register(api, 1)
    r = api.request("POST", "/v1/partitions", json={"id": "p2", "boot": {
        "kernel_url": "http://images.example/metal-hammer/vmlinuz",
        "cmdline": "console=ttyS2"}})
    assert r.status_code == 201, r.text
    api.wait_enrolled()
    url = f"{boot.url}/boot/{ids[0]}/fake/{signer_of(api).machine_token(ids[0], 1, FAKE)}/boot.ipxe"
    assert "console=ttyS0 " in requests.get(url, timeout=30).text
    assert api.request("DELETE", f"/v1/machines/{ids[0]}?force=true").status_code == 204
    r = api.request("POST", "/v1/machines", json=[machine_body(0, partition="p2")])
    assert r.status_code == 201, r.text
    api.wait_enrolled()
    time.sleep(0.3)
    r = requests.get(url, timeout=30)
    assert r.status_code == 200 and "console=ttyS2 " in r.text, r.text


def test_background_refresh_keeps_only_unchanged_entries():
    from metalboot_framework.boot_server.cache import BatchCache

    loads, checks = [], []
    changed = {2}

    def load(keys, _stale):
        loads.append(sorted(keys))
        return {k: f"v{k}" for k in keys}

    def refresh(held):
        checks.append(sorted(held))
        return [k for k in held if k not in changed]

    async def scenario():
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            cache = BatchCache(pool, load, ttl=0.3, batch_size=100, refresh=refresh)
            cache.start()
            try:
                assert await cache.get(1) == "v1" and await cache.get(2) == "v2"
                await asyncio.sleep(0.7)  # two TTLs: both would have expired
                assert await cache.get(1) == "v1"  # checked in the background: kept
                assert await cache.get(2) == "v2"  # changed: read again
                assert loads == [[1], [2], [2]]
                assert [1, 2] in checks  # both were checked while current
            finally:
                await cache.stop()

    asyncio.run(scenario())


def test_background_refresh_slower_than_a_fifth_of_the_ttl_still_keeps_entries():
    """A check that takes 0.3 ttl (a storm: its thread waits for the GIL) renews
    the entries before they expire: checks begin every half ttl, counted from
    one beginning to the next. Begun 0.8 ttl after the previous one ended, the
    entry would expire before each check's answer and every fetch load it again."""
    from metalboot_framework.boot_server.cache import BatchCache

    loads = []

    def load(keys, _stale):
        loads.append(sorted(keys))
        return {k: f"v{k}" for k in keys}

    def refresh(held):
        time.sleep(0.3)
        return list(held)

    async def scenario():
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            cache = BatchCache(pool, load, ttl=1.0, batch_size=100, refresh=refresh)
            cache.start()
            try:
                for _ in range(70):  # 3.5 s: three ttls, six checks
                    assert await cache.get(1) == "v1"
                    await asyncio.sleep(0.05)
            finally:
                await cache.stop()

    asyncio.run(scenario())
    assert loads == [[1]]


def test_workers_zero_is_one_per_cpu(boot_pair):
    api, boot = boot_pair(extra="workers = 0\n")
    ids = register(api, 1)
    cpus = len(os.sched_getaffinity(0))
    with open(f"/proc/{boot.proc.pid}/task/{boot.proc.pid}/children") as f:
        children = f.read().split()
    assert len(children) == (cpus if cpus > 1 else 0)
    token = signer_of(api).machine_token(ids[0], 1, FAKE)
    assert requests.get(f"{boot.url}/boot/{ids[0]}/fake/{token}/boot.ipxe").status_code == 200
    deadline = time.monotonic() + 30  # every worker listening (each logs it)
    while boot.log().count("listening on") < cpus and time.monotonic() < deadline:
        time.sleep(0.05)
    assert boot.log().count("listening on") == cpus
    assert boot.stop(signal.SIGTERM) == 0, boot.log()


def test_concurrent_misses_share_one_query_and_expire():
    import asyncio

    from metalboot_framework.boot_server.cache import BatchCache

    calls = []

    def load(keys, stale):
        calls.append((sorted(keys), stale))
        time.sleep(0.05)
        return {k: k * 2 for k in keys if k % 10}

    async def scenario():
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            # a ttl far above the load's 50 ms: a busy CI machine must not expire
            # the entry before the "cached" check
            cache = BatchCache(pool, load, ttl=2.0, batch_size=1000)
            values = await asyncio.gather(*(cache.get(k) for k in [1, 2, 3, 10, 2, 1] * 20))
            assert values == [2, 4, 6, None, 4, 2] * 20
            assert calls == [([1, 2, 3, 10], {})]  # one query for every concurrent miss
            assert await cache.get(3) == 6 and len(calls) == 1  # cached
            await asyncio.sleep(2.05)
            # expired: read again, given what it held (a None is not held)
            assert await cache.get(3) == 6 and calls[-1] == ([3], {3: 6})
            assert await cache.get(10) is None and calls[-1] == ([10], {})

    asyncio.run(scenario())

def test_warmed_keys_load_once_and_a_request_meanwhile_waits_for_that_load():
    """warm() queues only keys neither cached nor loading; a get() of a key
    being warmed shares its load; a warmed key is cached like a fetched one."""
    from metalboot_framework.boot_server.cache import BatchCache

    calls = []

    def load(keys, _stale):
        calls.append(sorted(keys))
        time.sleep(0.05)
        return {k: k * 2 for k in keys}

    async def scenario():
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            cache = BatchCache(pool, load, ttl=2.0, batch_size=1000)
            assert await cache.get(1) == 2
            assert cache.warm([1, 2, 3]) == 2  # 1 is cached
            assert cache.warm([2, 3, 4]) == 1  # 2 and 3 are queued already
            assert await cache.get(3) == 6  # waits for the warm load, no load of its own
            assert calls == [[1], [2, 3, 4]]  # the keys queued meanwhile: one load
            assert await asyncio.gather(cache.get(2), cache.get(4)) == [4, 8]
            assert len(calls) == 2  # cached by the warm load
            assert cache.warm([1, 2, 3, 4]) == 0

    asyncio.run(scenario())


def test_warm_up_that_cannot_read_warns_once_and_says_when_it_works_again(
        services, conf, caplog):
    """The looks at the machines about to boot fail while their table is away
    (renamed: a real error of the database): one warning for all the failed
    looks, one line when they work again."""
    import logging

    from metalboot_framework.boot_server.app import BootServer

    conf.set_override("warm_interval", 0.02, group="boot_server")

    def rename(old, new):
        with services.db.write_conn() as c:
            c.exec_driver_sql(f"ALTER TABLE {old} RENAME TO {new}")

    async def scenario():
        server = BootServer(services, conf.boot_server, 1024)
        rename("migration_machines", "migration_machines_away")
        await server.start()
        try:
            await asyncio.sleep(0.3)  # about 15 looks, all failing
            rename("migration_machines_away", "migration_machines")
            await asyncio.sleep(0.2)
        finally:
            await server.stop()

    with caplog.at_level(logging.INFO, logger="metalboot_framework.boot_server"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    warnings = [m for m in lines if m.startswith("cannot read the machines about to boot")]
    assert len(warnings) == 1 and "migration_machines" in warnings[0], lines
    assert lines.count("reading the machines about to boot works again") == 1, lines


def test_evidence_rows_share_a_future_per_group_and_a_cancel_is_the_waiters_own(services):
    """Rows without an id wait in groups of up to batch_size sharing one future;
    a batch takes whole groups; a request cancelled while it waits (its client
    went away) is cancelled alone, and its row is committed all the same."""
    from metalboot_framework import artifacts
    from metalboot_framework.boot_server.evidence import EvidenceWriter

    def row(machine_id, kind="fetch"):
        return artifacts.evidence_row(machine_id, FAKE, kind, "boot.ipxe", "10.0.0.1",
                                      timed=False)

    async def scenario():
        writer = EvidenceWriter(services, batch_size=4, batch_wait=0.05)

        async def fetch(machine_id):
            return await writer.add(row(machine_id))

        async def report():
            return await writer.add(row("m-report", "report"), with_id=True)

        first = [asyncio.ensure_future(fetch(f"m{i}")) for i in range(5)]
        reported = asyncio.ensure_future(report())
        later = [asyncio.ensure_future(fetch(f"m{i}")) for i in range(5, 10)]
        await asyncio.sleep(0)  # every row queued, none committed yet
        assert writer.rows == 0
        # groups: m0-m3 | m4 | the report | m5-m8 | m9
        assert [len(group) for _, group, _ in writer._queue] == [4, 1, 1, 4, 1]
        # one future per group: 5 for 11 rows
        assert len({id(future) for future, _, _ in writer._queue}) == 5
        first[1].cancel()
        results = await asyncio.gather(*first, reported, *later, return_exceptions=True)
        await writer.close()
        return results, writer

    results, writer = asyncio.run(scenario())
    assert isinstance(results[1], asyncio.CancelledError)
    fetches = results[:1] + results[2:5] + results[6:]
    assert fetches == [None] * 9
    assert isinstance(results[5], int) and results[5] > 0  # the report's evidence id
    # batches of whole groups, at most 4 rows unless one group is more:
    # [m0-m3], [m4, report], [m5-m8], [m9]
    assert (writer.batches, writer.rows) == (4, 11)
    with services.db.read_conn() as conn:
        stored = conn.execute(sqlalchemy.select(models.BootEvidence.machine_id)).scalars().all()
    assert sorted(stored) == sorted([f"m{i}" for i in range(10)] + ["m-report"])


NOT_FOUND = {"error": {"code": 404, "message": NotFound.description, "fields": {}}}


def _raw(url, data, read_delay=0.0, rcvbuf=None, timeout=30, meanwhile=None):
    """Send ``data`` on one connection, wait ``read_delay`` (then call
    ``meanwhile()``) before reading, and read until the server closes the
    connection (the last request asks it to)."""
    host, port = url.split("//", 1)[1].split(":")
    with socket.socket() as sock:
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect((host, int(port)))
        sock.sendall(data)
        time.sleep(read_delay)
        if meanwhile is not None:
            meanwhile()
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _responses(raw, heads=()):
    """[(status, headers, body)] of HTTP/1.1 responses with Content-Length, in
    order; those at the indexes ``heads`` answer HEAD (no body)."""
    out = []
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        status = int(lines[0].split()[1])
        length = 0 if status == 100 or len(out) in heads \
            else int(headers.get("content-length", 0))
        out.append((status, headers, raw[:length]))
        raw = raw[length:]
    return out


def test_paths_and_methods(boot_pair):
    api, boot = boot_pair()
    ids = register(api, 1)
    token = signer_of(api).machine_token(ids[0], 1, FAKE)
    script = f"/boot/{ids[0]}/fake/{token}/boot.ipxe"
    assert requests.get(boot.url + script).status_code == 200
    for method, path in [("POST", script), ("PUT", script), ("DELETE", script),
                         ("GET", f"/v1/machines/{ids[0]}/boot-report"),
                         ("HEAD", f"/v1/machines/{ids[0]}/boot-report"),
                         ("GET", f"/boot/{ids[0]}/fake/{token}/boot.ipxe/"),
                         ("GET", f"/boot/{ids[0]}//{token}/boot.ipxe"),
                         ("GET", f"/boot/{ids[0]}/fake/%7Bx%7D/boot.ipxe"),
                         ("GET", "/boot"), ("GET", "/")]:
        r = requests.request(method, boot.url + path)
        assert r.status_code == 404, (method, path)
        if method != "HEAD":
            assert r.json() == NOT_FOUND, (method, path)
    r = requests.get(boot.url + "/boot/%00/fake/x/boot.ipxe")
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "not found: the path contains a NUL character"
    # the path is matched percent-decoded, as werkzeug routes it: %2F is a "/",
    # so there is one segment too many and no route at all
    path = f"/boot/{ids[0]}/fa%2Fke/{token}/boot.ipxe"
    answers = [requests.get(url + path) for url in (boot.url, api.url)]
    assert [r.status_code for r in answers] == [404, 404]
    assert answers[0].json() == answers[1].json() == NOT_FOUND
    # and %25 is a "%" (no such interface)
    path = f"/boot/{ids[0]}/fa%25ke/{token}/boot.ipxe"
    answers = [requests.get(url + path) for url in (boot.url, api.url)]
    assert [r.status_code for r in answers] == [404, 404]
    assert answers[0].json() == answers[1].json()
    assert answers[0].json()["error"]["message"] == "no such boot artifact"
    assert len(evidence(api)) == 1


def test_iso_to_a_slow_reader_and_pipelined(boot_pair):
    api, boot = boot_pair()
    ids = register(api, 1)
    iso_url, iso_path = partition_iso(api, "p1", ISO_IFACE)
    iso = iso_url.split(boot.url, 1)[1]
    with open(iso_path, "rb") as f:
        data = f.read()
    assert len(data) > 1024 * 1024  # more than a socket takes before it is read
    # the whole image to a reader that waits before reading: the chunks wait
    # for the socket to take them
    answers = _responses(_raw(boot.url, f"GET {iso} HTTP/1.1\r\nHost: x\r\n"
                                        "Connection: close\r\n\r\n".encode(),
                              read_delay=1.0, rcvbuf=16384))
    assert [(s, h["content-length"]) for s, h, _ in answers] == [(200, str(len(data)))]
    assert answers[0][2] == data
    # pipelined: ranges, HEAD and a script answered in order on one connection
    token = signer_of(api).machine_token(ids[0], 1, FAKE)
    requests_ = [f"GET {iso} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-262143\r\n\r\n",
                 f"HEAD {iso} HTTP/1.1\r\nHost: x\r\nRange: bytes=10-19\r\n\r\n",
                 f"GET {iso} HTTP/1.1\r\nHost: x\r\nRange: bytes=-1000\r\n\r\n",
                 f"GET /boot/{ids[0]}/fake/{token}/boot.ipxe HTTP/1.1\r\nHost: x\r\n\r\n",
                 f"GET {iso} HTTP/1.1\r\nHost: x\r\nRange: bytes=1000-\r\n"
                 "Connection: close\r\n\r\n"]
    answers = _responses(_raw(boot.url, "".join(requests_).encode(), read_delay=0.5,
                              rcvbuf=16384), heads=(1,))
    assert [s for s, _, _ in answers] == [206, 206, 206, 200, 206]
    assert answers[0][2] == data[:262144]
    assert answers[1][1]["content-range"] == f"bytes 10-19/{len(data)}"
    assert answers[1][1]["content-length"] == "10" and answers[1][2] == b""
    assert answers[2][2] == data[-1000:]
    assert answers[3][2] == requests.get(boot.url + f"/boot/{ids[0]}/fake/{token}"
                                         "/boot.ipxe").content
    assert answers[4][2] == data[1000:]


def _deleted_files(pid):
    """The files process ``pid`` holds open that have no name left (temporary files)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.endswith(" (deleted)"):
            held.append(target)
    return held


def test_metalboot_server_sends_an_image_from_its_file(boot_pair):
    """metalboot-server (waitress) hands an image to the WSGI server's file
    wrapper: a BMC that reads slowly is sent from the file itself, where an
    answer made of chunks is spooled by waitress to a temporary file once
    more than 1 MB of it waits for the socket (five images asked at once on
    one connection: more than the kernel's socket buffer takes). A range that
    ends before the file does is still sent exactly."""
    api, _boot = boot_pair(public=False)
    register(api, 1)
    iso_url, iso_path = partition_iso(api, "p1", ISO_IFACE)
    iso = iso_url.split(api.url, 1)[1]
    with open(iso_path, "rb") as f:
        data = f.read()
    before = _deleted_files(api.proc.pid)
    held = []
    ask = f"GET {iso} HTTP/1.1\r\nHost: x\r\n"
    raw = _raw(api.url, (f"{ask}\r\n" * 4 + f"{ask}Connection: close\r\n\r\n").encode(),
               read_delay=1.0, rcvbuf=16384,
               meanwhile=lambda: held.extend(_deleted_files(api.proc.pid)))
    answers = _responses(raw)
    assert [(status, headers["content-length"], body == data)
            for status, headers, body in answers] == [(200, str(len(data)), True)] * 5
    assert held == before
    r = requests.get(api.url + iso, headers={"Range": "bytes=1048576-2097151"}, timeout=30)
    assert (r.status_code, r.content) == (206, data[1048576:2097152])
    r = requests.get(api.url + iso, headers={"Range": "bytes=1048576-"}, timeout=30)
    assert (r.status_code, r.content) == (206, data[1048576:])


def test_expect_100_continue(boot_pair):
    api, boot = boot_pair()
    ids = register(api, 1)
    token = signer_of(api).machine_token(ids[0], 1, FAKE)
    body = b'{"boot_interface": "fake", "message": "up"}'
    answers = _responses(_raw(boot.url, (
        f"POST /v1/machines/{ids[0]}/boot-report HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n"
        "Connection: close\r\n\r\n").encode() + body))
    assert [s for s, _, _ in answers] == [100, 201]
    r = requests.post(boot.url + f"/v1/machines/{ids[0]}/boot-report", data=body,
                      headers={"Expect": "something-else", "Content-Type": "application/json"})
    assert r.status_code == 417


def test_cancelled_waiter_leaves_the_others_their_value():
    from metalboot_framework.boot_server.cache import BatchCache

    def load(keys, _stale):
        time.sleep(0.1)
        return {k: k * 2 for k in keys}

    async def scenario():
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            cache = BatchCache(pool, load, ttl=10, batch_size=100)
            first = asyncio.ensure_future(cache.get(1))
            second = asyncio.ensure_future(cache.get(1))
            await asyncio.sleep(0.02)
            first.cancel()
            assert await second == 2
            assert first.cancelled()
            assert await cache.get(1) == 2

    asyncio.run(scenario())


def test_boot_report_body_too_large(boot_pair):
    """A boot report larger than [api] max_request_body_size is 413 whether its
    length is declared or it comes chunked, as from the Flask endpoint; the
    connection still answers the next request when the body was declared."""
    api, boot = boot_pair(extra="[api]\nmax_request_body_size = 2048\n")
    ids = register(api, 1)
    token = signer_of(api).machine_token(ids[0], 1, FAKE)
    url = f"/v1/machines/{ids[0]}/boot-report"
    big = b'{"boot_interface": "fake", "message": "' + b"x" * 4096 + b'"}'
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for server in (api, boot):
        r = requests.post(server.url + url, data=big, headers=headers, timeout=30)
        assert r.status_code == 413, (server.url, r.text)
        r = requests.post(server.url + url, data=iter([big[:1000], big[1000:]]),
                          headers=headers, timeout=30)  # chunked: no length up front
        assert r.status_code == 413, (server.url, r.text)
    assert "max_request_body_size" in r.json()["error"]["message"]
    small = b'{"boot_interface": "fake", "message": "up"}'
    answers = _responses(_raw(boot.url, (
        f"POST {url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(big)}\r\n\r\n").encode()
        + big + (f"POST {url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(small)}\r\n"
                 "Connection: close\r\n\r\n").encode() + small))
    assert [s for s, _, _ in answers] == [413, 201]
    assert [e.kind for e in evidence(api)] == ["report"]


def test_access_log_masks_tokens(boot_pair):
    """[boot_server] access_log: one line per request (client, method, path,
    status, length) with the machine's token masked, and one per evidence row."""
    api, boot = boot_pair(extra="access_log = true\n")
    ids = register(api, 1)
    token = signer_of(api).machine_token(ids[0], 1, FAKE)
    r = requests.get(f"{boot.url}/boot/{ids[0]}/fake/{token}/boot.ipxe", timeout=30)
    assert r.status_code == 200
    assert requests.get(f"{boot.url}/nope?x=1", timeout=30).status_code == 404
    assert boot.stop() == 0
    log = boot.log()
    assert token not in log
    assert re.search(rf"127\.0\.0\.1 GET /boot/{ids[0]}/fake/\S+/boot\.ipxe 200 "
                     rf"{len(r.content)}", log), log
    assert re.search(r"127\.0\.0\.1 GET /nope\?x=1 404 \d+", log), log
    assert re.search(rf"boot evidence \S+: machine {ids[0]} fetch boot.ipxe via fake", log), \
        [line for line in log.splitlines() if "evidence" in line]


def test_file_changed_on_disk_is_a_500_not_a_short_answer(boot_pair):
    """An image truncated in place while the boot server holds it open: a range
    it can no longer read whole is answered 500 (with the reason in the log)
    instead of fewer bytes than its Content-Length, and the connection goes on
    serving the next request."""
    api, boot = boot_pair(extra="cache_ttl = 600\n")
    register(api, 1)
    iso_url, iso_path = partition_iso(api, "p1", ISO_IFACE)
    iso = iso_url.split(boot.url, 1)[1]
    r = requests.get(boot.url + iso, headers={"Range": "bytes=0-99"}, timeout=30)
    assert r.status_code == 206  # now held open by the boot server
    os.truncate(iso_path, 50)
    answers = _responses(_raw(boot.url, (
        f"GET {iso} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-99\r\n\r\n"
        f"GET {iso} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\n"
        "Connection: close\r\n\r\n").encode()))
    assert [s for s, _, _ in answers] == [500, 206]
    assert answers[1][2] == r.content[:10]
    assert boot.stop() == 0
    assert "the file changed since it was opened" in boot.log()


def test_listens_on_a_host_name_and_not_on_a_taken_port(server_factory):
    """[boot_server] host_ip may be a name (granian takes addresses only); a
    second boot server on a port that one already serves fails with a clear
    line instead of sharing the port with it (SO_REUSEPORT)."""
    port = free_port()
    api = server_factory(extra_conf=_conf(port, public=False).replace(
        "host_ip = 127.0.0.1", "host_ip = localhost")).start()
    first = BootServerProcess(api, port)
    first.url = f"http://localhost:{port}"  # where "localhost" resolves first
    first.start()
    try:
        assert requests.get(f"http://localhost:{port}/", timeout=30).status_code == 404
        second = BootServerProcess(api, port).start(wait=False)
        assert second.proc.wait(60) == 1
        assert f"error: cannot listen on localhost:{port}: Address already in use" \
            in second.log()
        assert requests.get(f"http://localhost:{port}/", timeout=30).status_code == 404
    finally:
        first.stop()


def test_tokens_bound_to_interfaces_and_failed_conditionals_as_in_flask(boot_pair):
    """The boot server refuses a token of another interface and any token text
    without a 500, and records no evidence for a 412 or 416, as the API does."""
    api, boot = boot_pair(public=False)
    ids = register(api, 1)
    signer = signer_of(api)
    fake, alt = (signer.machine_token(ids[0], 1, name) for name in (FAKE, "fake-alt"))
    for server in (api, boot):
        assert requests.get(f"{server.url}/boot/{ids[0]}/fake-alt/{fake}/boot.ipxe",
                            timeout=30).status_code == 404
        assert requests.get(f"{server.url}/boot/{ids[0]}/fake/%C3%A9/boot.ipxe",
                            timeout=30).status_code == 404
        for body in ({"boot_interface": "fake-alt", "token": fake},
                     {"boot_interface": FAKE, "token": "\u00e9" * 32}):
            r = requests.post(f"{server.url}/v1/machines/{ids[0]}/boot-report", json=body,
                              timeout=30)
            assert r.status_code == 401, (server.url, body, r.text)
        url = f"{server.url}/boot/{ids[0]}/fake/{signer.machine_token(ids[0], 1, FAKE)}" \
              f"/boot.ipxe"
        assert requests.get(url, headers={"If-Match": '"x"'}, timeout=30).status_code == 412
        assert requests.get(url, headers={"Range": "bytes=9999-"},
                            timeout=30).status_code == 416
    assert evidence(api) == []
    for server in (api, boot):
        assert requests.get(f"{server.url}/boot/{ids[0]}/fake-alt/{alt}/boot.ipxe",
                            timeout=30).status_code == 200
    assert [e.interface for e in evidence(api)] == ["fake-alt"] * 2


def test_unverified_reports_are_bounded_by_the_boot_server(boot_pair):
    """Reports with a machine's unbound token (in the boot.ipxe anyone who knows
    its MAC may fetch) leave at most [artifacts] max_unverified_evidence
    unverified rows per machine, the newest, also through the boot server's
    group commit."""
    api, boot = boot_pair(extra="[artifacts]\nmax_unverified_evidence = 2\n"
                                "boot_network_prefixes = 127.0.0.0/8,::1/128\n")
    ids = register(api, 2)
    signer = signer_of(api)
    unbound = signer.unbound_token(ids[0], 1, FAKE)
    url = boot.url + f"/v1/machines/{ids[0]}/boot-report"
    answers = [requests.post(url, json={"boot_interface": FAKE, "message": str(n)},
                             headers={"Authorization": f"Bearer {unbound}"}, timeout=30)
               for n in range(5)]
    assert [r.status_code for r in answers] == [201] * 5
    r = requests.post(url, json={"boot_interface": FAKE, "message": "proof"}, timeout=30,
                      headers={"Authorization": f"Bearer {signer.machine_token(ids[0], 1, FAKE)}"})
    assert r.status_code == 201
    rows = evidence(api)
    assert [(e.kind, e.data["message"]) for e in rows] == \
        [("unverified", "3"), ("unverified", "4"), ("report", "proof")]
    assert "dropped 1 unverified boot evidence rows" in boot.log()
