"""Helpers shared by the benchmarks: servers in subprocesses, timing, RSS, tables."""

import os
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
    """metalboot-server in a subprocess with a fresh state directory."""

    token = "bench-admin-token"

    def __init__(self, extra_conf="", workdir=None):
        self.dir = workdir or tempfile.mkdtemp(prefix="metalboot-bench-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = os.path.join(self.dir, "metalboot.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nstate_path = {self.dir}/state\n{extra_conf}\n"
                    f"[api]\nport = {self.port}\nadmin_tokens = {self.token}\n")
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "metalboot_framework.cmd.server",
                                      "--config-file", conf], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_http(self.url + "/v1", self.proc)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {self.token}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


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
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def fmt(value, unit=""):
    return f"{value:.2f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def median(values):
    return statistics.median(values) if values else float("nan")
