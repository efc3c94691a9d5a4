"""metalboot-boot-agent as the tests run it: its console script with a
configuration of its own (no database), next to a real metalboot-server
whose API it reads."""

import os
import subprocess
import sys
import time

import requests

from tests.conftest import LOOPBACK_PREFIXES, ServerProcess, free_port, machine_body

AGENT = os.path.join(os.path.dirname(sys.executable), "metalboot-boot-agent")
INTERFACES = "fake,fake-alt"


def agent_url(port):
    return f"http://[::1]:{port}"


def setup_partition(api, count, boot_url, partition="p1", properties=None, enrolled=False,
                    first=1):
    """A partition booting from ``boot_url``, ``count`` machines (numbered
    from ``first``) and an agent token of the partition: (machine ids, token)."""
    r = api.request("POST", "/v1/partitions", json={"id": partition, "boot": {
        "kernel_url": "http://images.example/metal-hammer/vmlinuz",
        "initrd_url": "http://images.example/metal-hammer/initrd.img",
        "cmdline": "console=ttyS0", "metal_hammer_version": "v0.13.0",
        "boot_url": boot_url}})
    assert r.status_code == 201, r.text
    bodies = [machine_body(i, partition=partition, properties=dict(properties or {}))
              for i in range(first, first + count)]
    if enrolled:
        ids = api.register_enrolled(bodies)
    else:
        r = api.request("POST", "/v1/machines", json=bodies)
        assert r.status_code == 201, r.text
        ids = [b["id"] for b in bodies]
    r = api.request("POST", f"/v1/partitions/{partition}/agent-tokens",
                    json={"description": "test agents"})
    assert r.status_code == 201, r.text
    return ids, r.json()["token"]


class AgentProcess(ServerProcess):
    """One metalboot-boot-agent in ``directory`` (its state_dir survives
    restarts); stopped and its log read as a metalboot-server's."""

    def __init__(self, directory, api_url, token, port=None, partitions=("p1",),
                 agent_id="agent-a", extra="", interfaces=INTERFACES,
                 prefixes=LOOPBACK_PREFIXES):
        self.directory = directory
        directory.mkdir(exist_ok=True)
        self.port = port or free_port()
        self.url = agent_url(self.port)
        self.state_dir = directory / "state"
        self.log_path = directory / "agent.log"
        self.token_path = directory / "token"
        self.token_path.write_text(token + "\n")
        self.conf_path = directory / "agent.conf"
        self.conf_path.write_text(
            f"[DEFAULT]\nstate_path = {directory}/state-path\n"
            f"enabled_boot_interfaces = {interfaces}\n"
            f"[agent]\napi_url = {api_url}\ntoken_file = {self.token_path}\n"
            f"partitions = {','.join(partitions)}\nlisten = [::1]:{self.port}\n"
            f"state_dir = {self.state_dir}\nagent_id = {agent_id}\n"
            f"[artifacts]\nboot_network_prefixes = {','.join(prefixes)}\n{extra}")
        self.proc = None
        self._log = None

    def start(self, fresh=True, timeout=60):
        """Start it; wait until it listens (and, with ``fresh``, serves)."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([AGENT, "--config-file", str(self.conf_path)],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.log()}")
            try:
                r = self.healthz()
                if not fresh or r.status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"agent not {'fresh' if fresh else 'listening'} after "
                           f"{timeout} s:\n{self.log()}")

    def healthz(self):
        return requests.get(self.url + "/healthz", timeout=10)

    def get(self, path, **kw):
        return requests.get(self.url + path, timeout=30, **kw)

    def wait_delivered(self, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            health = self.healthz().json()
            if health["journal_pending"] == 0:
                return health
            if time.monotonic() > deadline:
                raise AssertionError(f"journal not delivered after {timeout} s: {health}")
            time.sleep(0.05)

    def wait_saved(self, partition="p1", timeout=30):
        """Wait until the agent has written ``partition``'s boot data to its
        state directory (it does so within a second of a change)."""
        path = self.state_dir / "partitions" / f"{partition}.json"
        deadline = time.monotonic() + timeout
        while not path.is_file():
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} not written after {timeout} s")
            time.sleep(0.05)


def evidence(api, machine_id):
    """The machine's evidence as the API lists it."""
    rows, cursor = [], 0
    while True:
        r = api.request("GET", f"/v1/machines/{machine_id}/evidence",
                        params={"since": cursor, "limit": 1000})
        assert r.status_code == 200, r.text
        body = r.json()
        rows += body["evidence"]
        if not body["evidence"]:
            return rows
        cursor = body["next_cursor"]
