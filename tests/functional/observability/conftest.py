"""A real metalboot-server (JSON logs) after a migration run, shared by the
metrics, logging and dashboard tests; headless Chromium helpers; a PNG reader."""

import os
import shutil
import struct
import subprocess
import time
import zlib

import pytest
import requests

from metalboot_framework.testing.simulator import FETCH, REPORT, SILENT, SimulatedFleet
from tests.conftest import signer_of
from tests.conftest import READER, ServerProcess, machine_body

COUNT = 6                  # machines
REQUEST_ID = "obs-req-0001"
WRONG_TOKEN = "f" * 32


def wait_for(server, migration_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = server.request("GET", f"/v1/migrations/{migration_id}").json()
        if m["state"] in ("done", "halted", "cancelled") and m["finished_at"]:
            return m
        time.sleep(0.1)
    raise AssertionError(f"migration still {m['state']} after {timeout}s: {m}")


class Run:
    """What the shared server went through."""

    def __init__(self, server, ids, finished, live, machine_token):
        self.server = server
        self.ids = ids
        self.finished = finished  # migration done: 5 done, 1 rolled back
        self.live = live          # migration still running: 1 machine awaiting boot
        self.machine_token = machine_token  # of ids[0]


def probe(server, machine_id):
    """Requests whose log lines the logging test looks for: one with a request id
    of ours, a dashboard URL with a token, artifact fetches with a wrong and with
    the right machine token (one 404, one 200)."""
    r = requests.get(f"{server.url}/v1/machines/{machine_id}", timeout=10,
                     headers={"Authorization": f"Bearer {READER}", "X-Request-Id": REQUEST_ID})
    assert r.status_code == 200 and r.headers["X-Request-Id"] == REQUEST_ID
    assert requests.get(f"{server.url}/dashboard?token={READER}", timeout=10).status_code == 200
    token = signer_of(server).machine_token(machine_id, 1, "fake-alt")
    assert requests.get(f"{server.url}/boot/{machine_id}/fake-alt/{WRONG_TOKEN}/boot.ipxe",
                        timeout=10).status_code == 404
    assert requests.get(f"{server.url}/boot/{machine_id}/fake-alt/{token}/boot.ipxe",
                        timeout=10).status_code == 200
    return token


@pytest.fixture(scope="session")
def observed(tmp_path_factory):
    """Server with log_format=json; migration 1 moves 6 machines fake -> fake-alt
    (4 boot by fetch, 1 by boot report, 1 never boots and is rolled back); then
    migration 2 takes the rolled-back machine again and stays awaiting boot."""
    path = tmp_path_factory.mktemp("observability")
    server = ServerProcess(path, extra_conf="enabled_boot_interfaces = fake,fake-alt\n"
                                            "log_format = json\n").start()
    try:
        assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
        bodies = [machine_body(i) for i in range(COUNT)]
        r = server.request("POST", "/v1/machines", json=bodies)
        assert r.status_code == 201, r.text
        ids = [b["id"] for b in bodies]
        behaviour = {ids[4]: REPORT, ids[5]: SILENT}
        with SimulatedFleet(server.url, server.token, default=FETCH, behaviour=behaviour):
            r = server.request("POST", "/v1/migrations", json={
                "selector": {"machines": ids}, "boot_interface": "fake-alt",
                "max_parallel": 3, "boot_timeout": 2})
            assert r.status_code == 202, r.text
            finished = wait_for(server, r.json()["id"])
        assert finished["counts"] == {"done": 5, "rolled_back": 1}, finished
        r = server.request("POST", "/v1/migrations", json={
            "selector": {"machines": [ids[5]]}, "boot_interface": "fake-alt",
            "boot_timeout": 3600})
        assert r.status_code == 202, r.text
        live = r.json()
        deadline = time.monotonic() + 20
        while server.request("GET", f"/v1/migrations/{live['id']}").json()["counts"] \
                != {"awaiting_boot": 1}:
            assert time.monotonic() < deadline, "migration 2 never reached awaiting_boot"
            time.sleep(0.1)
        token = probe(server, ids[0])
        yield Run(server, ids, finished, live, token)
    finally:
        server.stop()


# -- headless Chromium ------------------------------------------------------------------
def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture
def chromium(tmp_path):
    """Run headless Chromium on a URL: ``chromium(url, "--dump-dom")`` -> stdout."""
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    runs = []

    def run(url, *args, timeout=90):
        profile = tmp_path / f"profile{len(runs)}"
        profile.mkdir()
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
               "--hide-scrollbars", "--mute-audio", f"--user-data-dir={profile}",
               "--virtual-time-budget=15000", *args, url]
        runs.append(cmd)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, HOME=str(tmp_path)))
        assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-3000:]}"
        return proc.stdout

    return run


# -- PNG ----------------------------------------------------------------------------------
@pytest.fixture
def read_png():
    """The PNG reader below (no image library needed)."""
    return _read_png


def _read_png(path):
    """(width, height, channels, rows of bytes) of an 8-bit, non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat.append(chunk)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0, f"unsupported PNG: depth {depth}, interlace {interlace}"
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) \
                    & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows
