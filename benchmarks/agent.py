"""The partition boot agent: its boot storm beside nginx, and its feed.

Storm: 10,000 machines registered through a metalboot-server whose partition's
``boot_url`` points at one ``metalboot-boot-agent`` process (127.0.0.1); wrk
fetches every machine's boot.ipxe, then the partition ISO in ranges, from the
agent and from nginx serving the same bytes as static files (the same load as
``benchmarks/bootstorm.py``). The agent answers each fetch only after its
journal holds the evidence (fsync), and the run checks afterwards that the API
stored a row for every answer wrk counted. Targets: agent >= 0.8x nginx
requests/s for boot.ipxe, >= 0.95x nginx MB/s for the ISO.

Feed: the initial snapshot of the partition (GET boot-data: seconds and
bytes), then two agents following the change feed while the API changes the
partition's command line: the time from the PATCH's answer to the first
boot.ipxe that carries the change, on each agent (p50, p99); and the API
process's CPU while the two agents wait on the feed with nothing changing, per
agent.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import requests

from benchmarks import bootstorm
from benchmarks.common import (SUMMARY_HEADER, MetalbootServer, cpu_seconds, fmt, free_port,
                               loadavg, partition_iso, percentile, table, verdict, wait_http,
                               with_children)

PARTITION = "bench"
BOOT_URL = "http://boot.bench.example:6481"  # the partition's anycast URL (not dialled)


class Agent(MetalbootServer):
    """metalboot-boot-agent on 127.0.0.1 with a token of the bench partition
    (stopped like a MetalbootServer, its directory removed)."""

    def __init__(self, server, token, name="agent-a"):  # not super().__init__
        self._own_dir = True
        self.dir = tempfile.mkdtemp(prefix=f"metalboot-bench-{name}-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with open(os.path.join(self.dir, "token"), "w") as f:
            f.write(token + "\n")
        conf = os.path.join(self.dir, "agent.conf")
        with open(conf, "w") as f:
            f.write(f"[DEFAULT]\nstate_path = {self.dir}\n"
                    f"enabled_boot_interfaces = fake,{bootstorm.IFACE}\n"
                    f"[agent]\napi_url = {server.url}\ntoken_file = {self.dir}/token\n"
                    f"partitions = {PARTITION}\nlisten = 127.0.0.1:{self.port}\n"
                    f"state_dir = {self.dir}/state\nagent_id = {name}\n"
                    f"[redfish]\nipxe_efi_path = {bootstorm.IPXE_EFI}\n")
        self.log = open(os.path.join(self.dir, "agent.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "metalboot_framework.cmd.boot_agent", "--config-file", conf],
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_http(self.url + "/healthz", self.proc, timeout=300)
        except BaseException:
            self.stop()
            raise

    def pids(self):
        return with_children(self.proc.pid)

    def health(self):
        return requests.get(self.url + "/healthz", timeout=10).json()

    def wait_delivered(self, timeout=300):
        deadline = time.monotonic() + timeout
        while self.health()["journal_pending"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"journal not delivered after {timeout} s")
            time.sleep(0.2)



def agent_token(server):
    r = server.session.post(f"{server.url}/v1/partitions/{PARTITION}/agent-tokens", json={})
    r.raise_for_status()
    return r.json()["token"]


def point_partition_at(server, url):
    server.session.patch(f"{server.url}/v1/partitions/{PARTITION}",
                         json={"boot": {"boot_url": url}}).raise_for_status()


def storm(server, paths, iso, iso_path, work, connections, duration, range_kib):
    """The boot storm against one agent and nginx: summary rows."""
    root = os.path.join(work, "www")
    lua = os.path.join(work, "rotate.lua")
    with open(lua, "w") as f:
        f.write(bootstorm.WRK_LUA)
    bootstorm.write_static(server, paths, iso, iso_path, root)
    scripts_file = os.path.join(work, "scripts.txt")
    with open(scripts_file, "w") as f:
        f.write("\n".join(paths) + "\n")
    iso_file = os.path.join(work, "iso.txt")
    with open(iso_file, "w") as f:
        f.write(iso + "\n")
    size = os.path.getsize(iso_path)
    agent = nginx = None
    results = {}
    try:
        agent = Agent(server, agent_token(server))
        nginx = bootstorm.Nginx(root)
        for path in (paths[0], paths[-1], iso):  # the same bytes at the same paths
            a, b = requests.get(agent.url + path), requests.get(nginx.url + path)
            assert a.status_code == b.status_code == 200 and a.content == b.content, path
        before = bootstorm.evidence_count(server)
        for kind, paths_file, rng, seconds in (
                ("scripts", scripts_file, 0, 2 * duration),
                ("iso", iso_file, range_kib * 1024, duration)):
            results[kind] = [
                bootstorm.measure(name, url, pids(), paths_file, lua, connections, seconds,
                                  rng, size)
                for name, url, pids in (("agent", agent.url, agent.pids),
                                        ("nginx", nginx.url, nginx.pids))]
        agent.wait_delivered()
        stored = bootstorm.evidence_count(server) - before
    finally:
        if agent is not None:
            agent.stop()
        if nginx is not None:
            nginx.stop()
    rows, summary = [], []
    targets = {"scripts": ("rps", 0.8, "req/s"), "iso": ("mbps", 0.95, "MB/s")}
    for kind, label in (("scripts", f"boot.ipxe of {len(paths)} machines"),
                        ("iso", f"ISO ({size / 1e6:.1f} MB) in {range_kib} KiB ranges")):
        m, n = results[kind]
        rows += [bootstorm.result_row(label, r) for r in results[kind]]
        key, target, unit = targets[kind]
        ratio = m[key] / n[key]
        summary.append(("agent storm", f"{kind}: {unit} ({connections} conns)", fmt(m[key]),
                        fmt(n[key]) + " (nginx)", fmt(ratio, "x"), f">= {target}x",
                        verdict(ratio >= target)))
    table(f"Boot storm against one metalboot-boot-agent and nginx (1 worker): wrk, "
          f"{connections} connections, {2 * duration} s scripts, {duration} s ISO",
          bootstorm.STORM_COLUMNS, rows)
    # wrk counts answers other than 2xx and 3xx among its requests (and as errors)
    answered = results["scripts"][0]["requests"] - results["scripts"][0]["errors"]
    print(f"evidence: {stored} rows stored by the API for {answered} successful answers wrk "
          "counted (each journaled before its answer, then delivered)")
    for kind in ("scripts", "iso"):
        for r in results[kind]:
            if r["errors"]:
                print(f"warning: {kind} against {r['name']}: {r['errors']} errors")
    if stored < answered:
        raise RuntimeError(f"{answered - stored} answered fetches have no evidence")
    return summary


def snapshot_figures(server, token, rounds=3):
    url = f"{server.url}/v1/partitions/{PARTITION}/boot-data"
    seconds, size = [], 0
    for _ in range(rounds):
        start = time.perf_counter()
        r = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=300)
        r.raise_for_status()
        seconds.append(time.perf_counter() - start)
        size = len(r.content)
    return statistics.median(seconds), size, len(r.json()["machines"])


def feed(server, paths, changes, rest_seconds):
    """Two agents: change-to-served latency and the API's CPU at rest."""
    token = agent_token(server)
    snapshot_s, snapshot_bytes, machines = snapshot_figures(server, token)
    agents = []
    try:
        agents = [Agent(server, token, name) for name in ("agent-a", "agent-b")]
        path = paths[len(paths) // 2]
        latencies = []
        session = requests.Session()
        for i in range(changes):
            mark = f"bench.mark={i}"
            server.session.patch(f"{server.url}/v1/partitions/{PARTITION}", json={
                "boot": {"cmdline": f"console=ttyS0 {mark}"}}).raise_for_status()
            changed = time.perf_counter()
            for agent in agents:
                while mark not in session.get(agent.url + path, timeout=10).text:
                    if time.perf_counter() - changed > 30:
                        raise RuntimeError(f"{agent.url} did not serve change {i} in 30 s")
                    time.sleep(0.002)
                latencies.append(time.perf_counter() - changed)
        time.sleep(2)  # the long polls settle
        cpu0 = cpu_seconds(server.proc.pid)
        time.sleep(rest_seconds)
        per_agent = (cpu_seconds(server.proc.pid) - cpu0) / rest_seconds / len(agents)
    finally:
        for agent in agents:
            agent.stop()
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    table("Feed: snapshot, change to served on two agents, API CPU at rest",
          ["figure", "value"],
          [("snapshot of the partition", f"{machines} machines, {fmt(snapshot_s, ' s')}, "
            f"{snapshot_bytes / 1e6:.1f} MB"),
           (f"change to served ({len(latencies)} samples: {changes} changes x 2 agents)",
            f"p50 {fmt(p50 * 1000, ' ms')}, p99 {fmt(p99 * 1000, ' ms')}"),
           (f"API CPU at rest ({rest_seconds} s, 2 agents waiting on the feed)",
            f"{per_agent * 100:.2f}% of a core per agent")])
    return [("agent feed", f"snapshot of {machines} machines", fmt(snapshot_s, " s"),
             f"{snapshot_bytes / 1e6:.1f} MB", "", "", ""),
            ("agent feed", "change to served, p99 (2 agents)", fmt(p99 * 1000, " ms"), "",
             "", "<= 1000 ms", verdict(p99 <= 1.0)),
            ("agent feed", "API CPU at rest per agent", f"{per_agent * 100:.2f}%", "", "",
             "", "")]


def run(count=10000, connections=500, duration=15, range_kib=256, changes=50,
        rest_seconds=20, quick=False):
    if quick:
        count, connections, duration, changes, rest_seconds = 300, 50, 2, 5, 2
    bootstorm.prepare_host()
    work = tempfile.mkdtemp(prefix="metalboot-bench-agent-")
    os.chmod(work, 0o755)  # nginx's worker runs as www-data
    load = loadavg()
    server = None
    try:
        server, paths, _, _, _ = bootstorm.setup_metalboot(count)
        # what the API and the agents render alike: URLs under the partition's own
        point_partition_at(server, BOOT_URL)
        iso_url, iso_path = partition_iso(server, PARTITION, bootstorm.IFACE)
        iso = iso_url.split(BOOT_URL, 1)[1]
        summary = feed(server, paths, changes, rest_seconds)
        summary += storm(server, paths, iso, iso_path, work, connections, duration, range_kib)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average before: {load:.2f}, after: {loadavg():.2f}")
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10000)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--range-kib", type=int, default=256)
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--rest", type=int, default=20, help="seconds of the CPU-at-rest probe")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    summary = run(args.machines, args.connections, args.duration, args.range_kib, args.changes,
                  args.rest, args.quick)
    table("Agent summary", SUMMARY_HEADER, summary)


if __name__ == "__main__":
    main()
