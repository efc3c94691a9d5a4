"""Harness for the Redfish functional tests: real sushy-emulator processes.

The fixtures are in conftest.py.

Every emulator is the stock sushy-tools emulator with its fake driver, run
through ``sushy_emulator_with_http_boot_uri.py`` (which stores HttpBootUri per
system and shortens power delays, see its docstring), on 127.0.0.1, a free
port, and a fresh SUSHY_EMULATOR_STATE_DIR.
"""

import http.server
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid as uuid_mod

import bcrypt
import pytest
import requests

from metalboot_framework.snapshots import partition_info
from metalboot_framework.store import models
from tests import redfish_conf as redfish_conf_mod
from tests.ports import free_port  # noqa: F401  (tests import it from here)

HERE = os.path.dirname(os.path.abspath(__file__))
WRAPPER = os.path.join(HERE, "sushy_emulator_with_http_boot_uri.py")
sys.path.insert(0, HERE)

#: Debian trixie's ipxe.efi runs autoexec.ipxe from the ISO; Debian 12's (the
#: default here, `apt-get install ipxe`) does not, but has the same structure.
IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")

BMC_USER = "admin"
BMC_PASSWORD = "s3cret-Bmc-pass"


def fake_system(name, power_state="Off", boot_mode="UEFI", mac=None):
    system = {"uuid": str(uuid_mod.uuid4()), "name": name, "power_state": power_state,
              "external_notifier": False,
              "nics": [{"mac": mac or "52:54:00:%02x:%02x:%02x" % tuple(os.urandom(3)),
                        "ip": "127.0.0.2"}]}
    if boot_mode:
        system["boot_mode"] = boot_mode
    return system


class Emulator:
    """One sushy-emulator process."""

    def __init__(self, workdir, systems, auth=None, power_delay=(0.2, 0.6)):
        self.systems = systems
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.state_dir = os.path.join(workdir, "state")
        os.makedirs(self.state_dir)
        self.auth = auth
        self.power_delay = power_delay
        self.proc = None
        self.port = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        for _ in range(3):
            self.port = free_port()
            config = os.path.join(self.workdir, "emulator.conf")
            with open(config, "w") as f:
                f.write(f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
                        f"SUSHY_EMULATOR_LISTEN_PORT = {self.port}\n"
                        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
                        f"SUSHY_EMULATOR_STATE_DIR = {self.state_dir!r}\n"
                        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {self.systems!r}\n"
                        f"SUSHY_EMULATOR_POWER_DELAY = {tuple(self.power_delay)!r}\n")
                if self.auth:
                    htpasswd = os.path.join(self.workdir, "htpasswd")
                    user, password = self.auth
                    with open(htpasswd, "w") as h:
                        digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
                        h.write(f"{user}:{digest}\n")
                    f.write(f"SUSHY_EMULATOR_AUTH_FILE = {htpasswd!r}\n")
            log = open(os.path.join(self.workdir, "emulator.log"), "ab")
            self.proc = subprocess.Popen([sys.executable, WRAPPER, "--config", config],
                                         stdout=log, stderr=log, cwd=self.workdir)
            log.close()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if requests.get(self.url + "/redfish/v1/", timeout=1).status_code == 200:
                        return self
                except requests.RequestException:
                    pass
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"sushy-emulator did not start; see {self.workdir}/emulator.log")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    # -- reading the emulator's state directly --------------------------------
    def get(self, path, attempts=3):
        """A resource as the emulator shows it. A 5xx answer is read again: the
        stock emulator keeps its systems in a SQLite-backed dict that its
        request threads share, and now and then answers a read with 500; an
        observer of its state reads again, as the plugins' retries do."""
        auth = self.auth if self.auth else None
        for attempt in range(attempts):
            r = requests.get(self.url + path, auth=auth, timeout=5)
            if r.status_code < 500 or attempt == attempts - 1:
                break
            time.sleep(0.1)
        r.raise_for_status()
        return r.json()

    def system(self, system_uuid):
        return self.get(f"/redfish/v1/Systems/{system_uuid}")

    def media(self, system_uuid):
        coll = self.get(f"/redfish/v1/Systems/{system_uuid}/VirtualMedia")
        return {m["@odata.id"].rsplit("/", 1)[1]: self.get(m["@odata.id"])
                for m in coll["Members"]}

    def patch_boot(self, system_uuid, **boot):
        r = requests.patch(f"{self.url}/redfish/v1/Systems/{system_uuid}", json={"Boot": boot},
                           auth=self.auth, timeout=5)
        r.raise_for_status()

    def insert(self, system_uuid, image):
        r = requests.post(f"{self.url}/redfish/v1/Systems/{system_uuid}/VirtualMedia/Cd/"
                          f"Actions/VirtualMedia.InsertMedia", json={"Image": image},
                          auth=self.auth, timeout=10)
        r.raise_for_status()

    def eject(self, system_uuid, device="Cd"):
        r = requests.post(f"{self.url}/redfish/v1/Systems/{system_uuid}/VirtualMedia/{device}/"
                          f"Actions/VirtualMedia.EjectMedia", json={}, auth=self.auth,
                          timeout=10)
        r.raise_for_status()


@pytest.fixture
def sushy_emulator_with_http_boot_uri(tmp_path):
    """Factory: start(systems, auth=None) -> a running :class:`Emulator`."""
    started = []

    def start(systems, auth=None, power_delay=(0.2, 0.6)):
        emulator = Emulator(str(tmp_path / f"emulator{len(started)}"), systems, auth=auth,
                            power_delay=power_delay)
        started.append(emulator)
        return emulator.start()

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def fault_injecting_proxy():
    """Factory: start(upstream_port, fail_first=, fail_every=, slow_first=, delay=)."""
    from fault_injecting_proxy import FaultInjectingProxy
    proxies = []

    def start(upstream_port, **kwargs):
        proxy = FaultInjectingProxy(upstream_port, **kwargs).start()
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.stop()


class PartitionArtifactServer:
    """Stand-in for the core's artifact server: serves partition artifacts (ISOs)
    through the plugins' get_partition_artifact, plus fixed extra files, and
    logs every request. The emulator downloads inserted media from it."""

    def __init__(self):
        self.services = None
        self.extra = {}
        self.log = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = urllib.parse.urlsplit(self.path).path
                server.log.append(path)
                data = server.extra.get(path)
                if data is None:
                    parts = path.strip("/").split("/")
                    if len(parts) == 5 and parts[:2] == ["boot", "partitions"] \
                            and server.services is not None:
                        _, _, pid, iface, name = parts
                        with server.services.db.read() as s:
                            p = s.get(models.Partition, pid)
                            partition = partition_info(p) if p else None
                        if partition and iface in server.services.interfaces:
                            artifact = server.services.interfaces.get(iface) \
                                .get_partition_artifact(server.services, partition, name)
                            if artifact is not None:
                                with open(artifact.path, "rb") as f:
                                    data = f.read()
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def partition_artifact_server():
    server = PartitionArtifactServer()
    yield server
    server.stop()


FAST_BMC = dict(connect_timeout=2.0, read_timeout=5.0, retry_attempts=3, retry_interval=0.05,
                retry_max_interval=0.2, power_poll_interval=0.05, power_timeout=10.0,
                post_retry_interval=0.05, post_retry_timeout=1.0)


def make_conf(state_path, public_url, **bmc_overrides):
    return redfish_conf_mod.make_conf(state_path, public_url, IPXE_EFI, FAST_BMC, **bmc_overrides)


_fresh_bmc_connection_cache = redfish_conf_mod.fresh_bmc_connection_cache


@pytest.fixture
def redfish_services(tmp_path, partition_artifact_server):
    """Factory: real Services (sqlite in tmp) with both Redfish interfaces enabled."""
    def conf_for(index, **bmc_overrides):
        return make_conf(tmp_path / f"state{index}", partition_artifact_server.url,
                         **bmc_overrides)

    def serve(services):
        partition_artifact_server.services = services

    with redfish_conf_mod.services_factory(conf_for, serve) as make:
        yield make


def add_machine(services, emulator_url, system, machine_id=None, partition_id="p1",
                interface="redfish-http-url", boot_mode="uefi", username=BMC_USER,
                password=BMC_PASSWORD):
    machine_id = machine_id or system["name"]
    with services.transactions.now() as unit:
        s = unit.session
        if s.get(models.Partition, partition_id) is None:
            s.add(models.Partition(id=partition_id, kernel_url="http://127.0.0.1:1/k",
                                   cmdline="console=ttyS0", properties={}))
            s.flush()
        s.add(models.Machine(id=machine_id, partition_id=partition_id,
                             bmc_address=emulator_url, bmc_username=username,
                             bmc_password=services.password_key.seal(password),
                             bmc_verify_tls=False,
                             boot_interface=interface, boot_mode=boot_mode, state="ready",
                             properties={"redfish_system_id": system["uuid"]},
                             token_generation=1))
        s.flush()
        for i, nic in enumerate(system["nics"]):
            s.add(models.Nic(mac=nic["mac"], machine_id=machine_id, position=i))
    return machine_id


def events(services, machine_id):
    with services.db.read() as s:
        return [(e.kind, e.message) for e in
                s.query(models.Event).filter_by(machine_id=machine_id).order_by(models.Event.id)]
