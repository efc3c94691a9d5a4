"""Shared fixtures: configuration in a temporary state directory, the Flask
test client, and a real metalboot-server process."""

import os
import subprocess
import sys
import time

import pytest
import requests

from metalboot_framework.conf import CONF
from tests.ports import free_port  # noqa: F401  (tests import it from here)

ADMIN = "admin-token-for-tests"
READER = "reader-token-for-tests"
# Tests play the booting machines from this host: a fetch of boot.ipxe by MAC
# from loopback proves a boot only because the tests' configuration says so
# ([artifacts] boot_network_prefixes; the default binds no loopback address).
LOOPBACK_PREFIXES = ["127.0.0.0/8", "::1/128"]

#: The modules that take longest (``--durations``), scheduled first: pytest-xdist
#: hands modules to its workers in order (``--dist loadscope``), and one of
#: these handed out last would leave a single worker running it alone.
LONGEST_FIRST = (
    "tests/functional/test_migrations.py",
    "tests/functional/test_benchmarks_smoke.py",
    "tests/functional/test_boot_server.py",
    "tests/unit/test_schemathesis.py",
    "tests/functional/test_container_image.py",
    "tests/conformance/test_conformance_dhcp.py",
    "tests/conformance/test_kit_catches_violations.py",
    "tests/functional/cli/test_cli_api.py",
)


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath) + os.sep
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path).removeprefix(root),
                                         len(LONGEST_FIRST)))


def hook_plugin_site(site, module, source):
    """A directory that, on PYTHONPATH, installs ``source`` as the hook plugin
    ``module`` (a distribution with a metalboot.hooks entry point)."""
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[metalboot.hooks]\n{module} = {module}\n")
    (site / f"{module}.py").write_text(source)
    return site


# METALBOOT_TEST_DB=postgresql runs every test that uses a database on a real
# PostgreSQL server (started once per run) instead of SQLite files.
USE_POSTGRES = os.environ.get("METALBOOT_TEST_DB") == "postgresql"


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for this test run."""
    from tests.pgserver import PostgresServer
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def database_url(request):
    """A fresh database: PostgreSQL under METALBOOT_TEST_DB=postgresql, else None (SQLite)."""
    if not USE_POSTGRES:
        return None
    return request.getfixturevalue("postgres").create_database()


@pytest.fixture
def conf(tmp_path, database_url):
    """The global CONF, parsed with no files and pointed at a temporary state dir."""
    CONF.clear()
    CONF([], project="metalboot", default_config_files=[], default_config_dirs=[])
    CONF.set_override("state_path", str(tmp_path / "state"))
    if database_url:
        CONF.set_override("connection", database_url, group="database")
    CONF.set_override("admin_tokens", [ADMIN], group="api")
    CONF.set_override("reader_tokens", [READER], group="api")
    CONF.set_override("boot_network_prefixes", LOOPBACK_PREFIXES, group="artifacts")
    yield CONF
    CONF.clear()
    CONF.reset()


@pytest.fixture
def services(conf):
    from metalboot_framework.services import Services
    svc = Services.from_conf(conf)
    yield svc
    svc.step_loop.close()
    svc.db.dispose()


@pytest.fixture
def app(services):
    from metalboot_framework.api import create_app
    return create_app(services)


class ApiClient:
    """The Flask test client with a token and JSON by default."""

    def __init__(self, client, token=ADMIN):
        self.client = client
        self.token = token

    def _headers(self, headers):
        out = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        out.update(headers or {})
        return out

    def get(self, url, headers=None, **kw):
        return self.client.get(url, headers=self._headers(headers), **kw)

    def delete(self, url, headers=None, **kw):
        return self.client.delete(url, headers=self._headers(headers), **kw)

    def post(self, url, json=None, headers=None, **kw):
        if json is not None:
            kw["json"] = json
        return self.client.post(url, headers=self._headers(headers), **kw)

    def patch(self, url, json=None, headers=None, **kw):
        if json is not None:
            kw["json"] = json
        return self.client.patch(url, headers=self._headers(headers), **kw)


@pytest.fixture
def api(app):
    return ApiClient(app.test_client())


@pytest.fixture
def reader_api(app):
    return ApiClient(app.test_client(), token=READER)


def machine_body(n, partition="p1", **extra):
    body = {"id": f"00000000-0000-4000-8000-{n:012x}", "partition": partition,
            "nics": [{"mac": "52:54:%02x:%02x:%02x:%02x" % (
                (n >> 24) & 0xFF, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF)}],
            "bmc": {"address": "127.0.0.1:8000", "username": "root",
                    "password": f"bmc-secret-{n}"}}
    body.update(extra)
    return body


@pytest.fixture
def partition(api):
    r = api.post("/v1/partitions", json={"id": "p1", "boot": {
        "kernel_url": "http://images.example/metal-hammer/vmlinuz",
        "initrd_url": "http://images.example/metal-hammer/initrd.img",
        "cmdline": "console=ttyS0", "metal_hammer_version": "v0.13.0"}})
    assert r.status_code == 201, r.json
    return r.json


def signer_of(server):
    """The token signer of a running ServerProcess (reads its database's secret)."""
    from metalboot_framework.store.db import Database
    from metalboot_framework.tokens import TokenSigner
    url = server.database_url or f"sqlite:///{server.state}/metalboot.sqlite"
    db = Database(url)
    try:
        return TokenSigner.from_database(db)
    finally:
        db.dispose()


class ServerProcess:
    """A metalboot-server subprocess with its own config, state dir and log."""

    def __init__(self, tmp_path, extra_conf="", env=None, port=None, admin_token=ADMIN,
                 database_url=None, command="metalboot_framework.cmd.server", key_file=None,
                 host_ip="127.0.0.1"):
        self.tmp_path = tmp_path
        self.port = port or free_port()
        self.url = f"http://{f'[{host_ip}]' if ':' in host_ip else host_ip}:{self.port}"
        self.state = tmp_path / "state"
        self.log_path = tmp_path / "server.log"
        self.conf_path = tmp_path / "metalboot.conf"
        tokens = f"admin_tokens = {admin_token}\nreader_tokens = {READER}\n" if admin_token else ""
        # one BMC password key for every server of a test unless it says
        # otherwise: they may share a database (several conductors, a restart
        # on PostgreSQL), as hosts sharing one copy the key file
        self.key_file = key_file or tmp_path.parent / "bmc-password.key"
        database = ("[database]\n"
                    + (f"connection = {database_url}\n" if database_url else "")
                    + f"bmc_password_key_file = {self.key_file}\n")
        self.conf_path.write_text(
            f"[DEFAULT]\nstate_path = {self.state}\n{extra_conf}\n"
            f"[api]\nhost_ip = {host_ip}\nport = {self.port}\n{tokens}"
            + ("" if "poll_interval" in extra_conf else "[conductor]\npoll_interval = 0.1\n")
            + ("" if "boot_network_prefixes" in extra_conf else
               f"[artifacts]\nboot_network_prefixes = {','.join(LOOPBACK_PREFIXES)}\n")
            + database)
        self.command = command
        self.database_url = database_url
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.token = admin_token

    def start(self, wait=True):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.command, "--config-file", str(self.conf_path)],
            stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(self.url + "/v1", timeout=5).status_code == 200:
                    return
            except requests.RequestException:  # not listening yet, or too busy to answer
                time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.log()}")

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def headers(self, token=None):
        return {"Authorization": f"Bearer {token or self.token}"}

    def request(self, method, path, token=None, **kw):
        return requests.request(method, self.url + path, headers=self.headers(token),
                                timeout=60, **kw)

    def wait_enrolled(self, timeout=60):
        """Until the conductor has enrolled every registered machine; returns them."""
        deadline = time.monotonic() + timeout
        while True:
            machines, marker = [], ""
            while True:
                page = self.request("GET", f"/v1/machines?limit=1000{marker}").json()
                machines += page["machines"]
                if not page["next_marker"]:
                    break
                marker = f"&marker={page['next_marker']}"
            if not any(m["state"] == "enrolling" for m in machines):
                return machines
            if time.monotonic() > deadline:
                raise AssertionError(f"machines still enrolling after {timeout} s")
            time.sleep(0.1)

    def register_enrolled(self, bodies):
        """Register machines and wait until they are enrolled; a ``fake_fail`` in their
        properties is set only afterwards (a BMC that breaks after enrolment), so
        that it fails the migration, not the enrolment. Returns their ids."""
        plain = []
        for body in bodies:
            props = dict(body.get("properties") or {})
            props.pop("fake_fail", None)
            plain.append(dict(body, properties=props))
        r = self.request("POST", "/v1/machines", json=plain)
        assert r.status_code == 201, r.text
        enrolled = {m["id"]: m for m in self.wait_enrolled()}
        for body in bodies:
            assert enrolled[body["id"]]["state"] == "ready", enrolled[body["id"]]
            if (body.get("properties") or {}).get("fake_fail"):
                r = self.request("PATCH", f"/v1/machines/{body['id']}",
                                 json={"properties": body["properties"]})
                assert r.status_code == 200, r.text
        return [b["id"] for b in bodies]

    def stop(self, sig=None, timeout=20):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        if sig is None:
            self.proc.terminate()
        else:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._log.close()


@pytest.fixture
def server_factory(tmp_path, request):
    servers = []
    shared = {}

    def make(**kw):
        path = tmp_path / f"server{len(servers)}"
        path.mkdir()
        if USE_POSTGRES and "database_url" not in kw:
            # one database per test: servers of a test share it, like a restart
            if "url" not in shared:
                shared["url"] = request.getfixturevalue("postgres").create_database()
            kw["database_url"] = shared["url"]
        server = ServerProcess(path, **kw)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def api_contract(monkeypatch):
    """Every API answer the test receives matches the served OpenAPI document,
    read strictly (see tests/contract.py)."""
    from tests.contract import Recorder
    recorder = Recorder()
    recorder.install(monkeypatch)
    yield recorder
    problems = recorder.problems()
    if problems:
        pytest.fail("answers that the OpenAPI document does not allow:\n"
                    + "\n".join(problems[:20]), pytrace=False)
