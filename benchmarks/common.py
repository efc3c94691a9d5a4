"""Helpers shared by the benchmarks: servers in subprocesses, timing, RSS, tables."""

import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import requests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


def peak_rss_mb(pid):
    """VmHWM: the process's peak resident set, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class MetalbootServer:
    """metalboot-server (or metalboot-api / metalboot-conductor: ``command``) in a
    subprocess with a fresh state directory.

    ``database_url``: a shared database (PostgreSQL) instead of the state
    directory's SQLite file; ``public_url``: the URL machines and BMCs reach the
    API under (every process of one deployment must share it); ``wait``: a
    process without an API (a conductor) is waited for by its log line.
    """

    token = "bench-admin-token"

    def __init__(self, extra_conf="", workdir=None, command="metalboot_framework.cmd.server",
                 database_url=None, public_url=None, host=None, password_key_file=None):
        """``password_key_file``: the BMC password key file, shared by every
        process on one database (each would make its own in its state dir)."""
        self._own_dir = workdir is None  # removed by stop()
        self.dir = workdir or tempfile.mkdtemp(prefix="metalboot-bench-")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.conf_path = conf = os.path.join(self.dir, "metalboot.conf")
        self.database_url = database_url
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nstate_path = {self.dir}/state\n"
                    + (f"host = {host}\n" if host else "") + f"{extra_conf}\n"
                    f"[api]\nport = {self.port}\nadmin_tokens = {self.token}\n"
                    + (f"public_url = {public_url}\n" if public_url else "")
                    + ("[database]\n" if database_url or password_key_file else "")
                    + (f"connection = {database_url}\n" if database_url else "")
                    + (f"bmc_password_key_file = {password_key_file}\n"
                       if password_key_file else ""))
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", command, "--config-file", conf],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        try:
            if command.endswith(".conductor"):
                wait_log(self.log_path, " running (", self.proc)
            else:
                wait_http(self.url + "/v1", self.proc)
        except BaseException:
            self.stop()
            raise
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {self.token}"

    def wait_enrolled(self, timeout=600):
        """Until the conductor has enrolled every registered machine (so that the
        enrolment's own plugin calls are not measured as migration work)."""
        deadline = time.monotonic() + timeout
        while True:
            page = self.session.get(self.url + "/v1/machines?state=enrolling&limit=1",
                                    timeout=60).json()
            if not page["machines"]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"machines still enrolling after {timeout} s")
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def wait_log(path, text, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{path}: process exited with {proc.returncode}")
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{path}: no {text!r} after {timeout}s")


_ISO_SCRIPT = """
import sys
from metalboot_framework.conf import CONF
from metalboot_framework.services import Services
CONF(["--config-file", sys.argv[1]], project="metalboot")
services = Services.from_conf(CONF, upgrade=False)
from metalboot_framework import artifacts
with services.db.read_conn() as conn:
    partition = artifacts.load_partitions(conn, [sys.argv[2]])[sys.argv[2]]
iface = services.interfaces.get(sys.argv[3])
spec, path = iface.ensure_iso(services, partition)
print(iface.iso_url(services, partition))
print(path)
"""


def partition_iso(server, partition, interface="redfish-virtual-media-ipxe"):
    """(URL, local path) of a partition's iPXE ISO, built with the server's own
    configuration (in a subprocess, so this process's CONF stays untouched)."""
    out = subprocess.run([sys.executable, "-c", _ISO_SCRIPT, server.conf_path, partition,
                          interface], check=True, capture_output=True, text=True).stdout
    url, path = out.strip().splitlines()[-2:]
    return url, path


def machine_tokens(server, ids, interface, generation=1):
    """Per-machine boot tokens for ``interface``, signed with the server database's
    secret."""
    from metalboot_framework.store.db import Database
    from metalboot_framework.tokens import TokenSigner
    db = Database(server.database_url
                  or f"sqlite:///{os.path.join(server.dir, 'state', 'metalboot.sqlite')}")
    try:
        signer = TokenSigner.from_database(db)
        return {mid: signer.machine_token(mid, generation, interface) for mid in ids}
    finally:
        db.dispose()


def machine_id(n):
    return f"00000000-0000-4000-8000-{n:012x}"


def mac(n, prefix="52:54"):
    return "%s:%02x:%02x:%02x:%02x" % (prefix, (n >> 24) & 255, (n >> 16) & 255,
                                       (n >> 8) & 255, n & 255)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_probe():
    """Seconds a fixed CPU-bound loop (5 million additions) takes in this
    process, best of three: a neighbour on the same cores shows here even when
    the hypervisor reports no steal (a sibling hyperthread, a shared cache).
    Compare it only between runs on one machine: a busy neighbour can nearly
    double it."""
    def once():
        started = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i
        return time.perf_counter() - started

    return min(once() for _ in range(3))


class HostSteal:
    """The share of this host's CPU time that its hypervisor gave to others
    (``steal`` in /proc/stat) from creation to :meth:`stop`. A wall time
    measured while a neighbour takes a fifth of the CPUs says more about the
    neighbour than about metalboot: the benchmarks print it beside their
    wall times. None where /proc/stat has no steal column."""

    CONTENDED = 0.05  # above: the run's wall time is not comparable

    def __init__(self):
        self._start = self._read()
        self._end = None

    def stop(self):
        """End the measurement here (else at :meth:`share`)."""
        self._end = self._read()

    @staticmethod
    def _read():
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        return (fields[7], sum(fields)) if len(fields) == 8 else None

    def share(self):
        end = self._end or self._read()
        if self._start is None or end is None or end[1] == self._start[1]:
            return None
        return (end[0] - self._start[0]) / (end[1] - self._start[1])

    def describe(self):
        """A line for the report: the share, and whether it makes the run's wall
        time incomparable."""
        share = self.share()
        if share is None:
            return "host: CPU time stolen by a hypervisor unknown (no steal in /proc/stat)"
        line = f"host: {share * 100:.1f}% of the CPU time stolen by the hypervisor during the run"
        if share > self.CONTENDED:
            line += (f" (above {self.CONTENDED * 100:.0f}%: a contended host; this wall time "
                     "is not comparable with an uncontended run's)")
        return line


def wait_http(url, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            requests.get(url, timeout=1)
            return
        except requests.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} not up after {timeout}s")


def table(title, header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    print(f"\n{title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def fmt(value, unit=""):
    return f"{value:.2f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def median(values):
    return statistics.median(values) if values else float("nan")


#: Rows of the combined table printed by ``run.py scale`` (benchmark, measurement,
#: metalboot, baseline, ratio, target, result).
SUMMARY_HEADER = ["benchmark", "measurement", "metalboot", "baseline", "ratio", "target",
                  "result"]


def verdict(ok):
    return "met" if ok else "MISSED"


class BootServer(MetalbootServer):
    """metalboot-boot-server with the configuration file of ``server`` (stopped
    like a MetalbootServer; its directory stays the server's)."""

    def __init__(self, server, port):  # not super().__init__: that starts metalboot-server
        self._own_dir = False
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(server.dir, "boot-server.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "metalboot_framework.cmd.boot_server", "--config-file",
             server.conf_path], stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_log(self.log_path, "listening on", self.proc)
        except BaseException:
            self.stop()
            raise

    def pids(self):
        """The process and its workers ([boot_server] workers > 1)."""
        return with_children(self.proc.pid)

    def committed(self):
        """(evidence rows, transactions) of all its processes, from their logs at exit."""
        with open(self.log_path, errors="replace") as f:
            found = re.findall(r"boot evidence committed: (\d+) rows in (\d+) transactions",
                               f.read())
        return (sum(int(r) for r, _ in found), sum(int(t) for _, t in found))

    def snapshots(self):
        """(machine snapshots read from the database, kept by their revisions) of
        all its processes, from their logs at exit."""
        with open(self.log_path, errors="replace") as f:
            found = re.findall(r"machine snapshots: (\d+) read from the database, (\d+) kept",
                               f.read())
        return (sum(int(r) for r, _ in found), sum(int(k) for _, k in found))


def with_children(pid):
    """``pid`` and its child processes (a server's workers)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [pid] + [int(p) for p in f.read().split()]
    except OSError:
        return [pid]
