"""Boot storm: 10,000 machines fetch their boot.ipxe, then the partition ISO in ranges.

Compared: metalboot-boot-server (the asyncio artifact server, one process, on
the SQLite database of a metalboot-server that registered the machines and
whose ``[api] public_url`` points at it) against nginx (Debian
``nginx-light``, one worker process, started from a config in a temporary
directory, 127.0.0.1 only) serving the very same bytes as static files at the
same paths. ``--also-api`` measures metalboot-server's own artifact endpoints
(Flask on waitress) as a third server, the figures before the boot server.

The load generator is wrk (Debian package ``wrk``, C, epoll) with a Lua script
that rotates over the URLs, 500 connections on 2 threads:

- scripts: GET /boot/<machine>/<iface>/<token>/boot.ipxe over all 10,000
  machines (metalboot checks the token, renders each machine's script from a
  snapshot cached ``[boot_server] cache_ttl`` = 1 s and answers once the fetch
  is committed as boot evidence; nginx serves the rendered files written to
  disk first);
- ISO: GET /boot/partitions/<partition>/<iface>/<name> with ``Range:`` headers
  of ``--range-kib`` KiB each, over the whole image, as a BMC reads it
  (metalboot: sendfile() from the event loop, as nginx's ``sendfile on``).

Printed per run: requests/s, MB/s, p50/p99 latency (wrk's own histogram),
errors, and the CPU the server and the load generator used (in cores), so
that a saturated load generator would show; then the evidence rows the boot
server committed during the scripts run and in how many transactions (each
answered fetch has its row). Targets: metalboot >= 0.25x nginx requests/s for
rendered scripts, >= 0.6x nginx MB/s for ISO bytes.
"""

import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import subprocess
import tempfile

import requests

from benchmarks.common import (SUMMARY_HEADER, BootServer, MetalbootServer, cpu_seconds, fmt,
                               free_port, loadavg, mac, machine_id, machine_tokens, partition_iso,
                               table, verdict, wait_http, with_children)

IFACE = "redfish-virtual-media-ipxe"
IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")

WRK_LUA = r"""
-- rotate over the paths in args[1]; with args[2] > 0, over Range requests of
-- args[2] bytes covering a file of args[3] bytes at each path
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

local reqs = {}
local n = 0
local i = 0

function init(args)
  local range = tonumber(args[2] or "0")
  local size = tonumber(args[3] or "0")
  for line in io.lines(args[1]) do
    if range > 0 then
      local offset = 0
      while offset < size do
        local last = math.min(offset + range, size) - 1
        n = n + 1
        reqs[n] = wrk.format("GET", line, {["Range"] = "bytes=" .. offset .. "-" .. last})
        offset = offset + range
      end
    else
      n = n + 1
      reqs[n] = wrk.format("GET", line)
    end
  end
  i = math.floor(n * (id or 0) / 2)  -- each thread starts elsewhere in the list
end

function request()
  i = i % n + 1
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "bytes": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, '
    .. '"max_us": %d, "connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}\n',
    summary.requests, summary.bytes, summary.duration, latency:percentile(50),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
"""

NGINX_CONF = """
daemon off;
master_process on;
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    types {{ application/x-iso9660-image iso; text/plain ipxe; }}
    default_type application/octet-stream;
    access_log {dir}/access.log;
    client_body_temp_path {dir}/tmp;
    proxy_temp_path {dir}/tmp;
    fastcgi_temp_path {dir}/tmp;
    uwsgi_temp_path {dir}/tmp;
    scgi_temp_path {dir}/tmp;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


class Nginx:
    def __init__(self, root, workers=1):
        self.dir = tempfile.mkdtemp(prefix="metalboot-bench-nginx-")
        os.chmod(self.dir, 0o755)
        os.makedirs(os.path.join(self.dir, "tmp"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=self.dir, port=self.port, root=root, workers=workers))
        self.log = open(os.path.join(self.dir, "stderr.log"), "wb")
        self.proc = subprocess.Popen(["nginx", "-c", conf, "-p", self.dir], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        try:
            wait_http(self.url + "/", self.proc)
        except BaseException:
            self.stop()
            raise

    def pids(self):
        """The master and its workers (the workers do the serving)."""
        return with_children(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown, workers included
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def wrk(base_url, paths_file, lua, connections, duration, range_bytes=0, size=0, threads=2):
    """Run wrk; returns its figures plus the CPU (seconds) it used."""
    argv = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{duration}s",
            "--timeout", "30s", "-s", lua, base_url, "--", paths_file, str(range_bytes),
            str(size)]
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    line = [x for x in text.splitlines() if x.startswith("WRKJSON ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{text}")
    result = json.loads(line[-1].split(" ", 1)[1])
    result["cpu"] = usage.ru_utime + usage.ru_stime
    return result


def measure(name, base_url, pids, paths_file, lua, connections, duration, range_bytes=0,
            size=0):
    cpu0 = sum(cpu_seconds(p) for p in pids)
    r = wrk(base_url, paths_file, lua, connections, duration, range_bytes, size)
    server_cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    seconds = r["duration_us"] / 1e6
    errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
    return {"name": name, "requests": r["requests"], "rps": r["requests"] / seconds,
            "mbps": r["bytes"] / seconds / 1e6, "p50": r["p50_us"] / 1000,
            "p99": r["p99_us"] / 1000, "errors": errors, "server_cores": server_cpu / seconds,
            "wrk_cores": r["cpu"] / seconds}


def evidence_count(server):
    from metalboot_framework.store.db import Database
    db = Database(f"sqlite:///{os.path.join(server.dir, 'state', 'metalboot.sqlite')}")
    try:
        with db.read_conn() as conn:
            return conn.exec_driver_sql("SELECT count(*) FROM boot_evidence").scalar()
    finally:
        db.dispose()


def setup_metalboot(count, workers=1):
    boot_port = free_port()
    boot_url = f"http://127.0.0.1:{boot_port}"
    server = MetalbootServer(public_url=boot_url, extra_conf=(
        f"enabled_boot_interfaces = fake,{IFACE}\n[conductor]\ndrift_check_interval = 0\n"
        f"[redfish]\nipxe_efi_path = {IPXE_EFI}\n"
        f"[boot_server]\nhost_ip = 127.0.0.1\nport = {boot_port}\nworkers = {workers}\n"))
    try:
        s = server.session
        s.post(server.url + "/v1/partitions", json={"id": "bench", "boot": {
            "kernel_url": "http://images.example/metal-hammer/vmlinuz",
            "initrd_url": "http://images.example/metal-hammer/initrd.img",
            "cmdline": "console=ttyS0", "metal_hammer_version": "v0.13.0"}}).raise_for_status()
        ids = [machine_id(i) for i in range(count)]
        for start in range(0, count, 10000):
            s.post(server.url + "/v1/machines", json=[
                {"id": machine_id(i), "partition": "bench", "nics": [{"mac": mac(i)}],
                 "boot_mode": "uefi"} for i in range(start, min(count, start + 10000))],
                timeout=300).raise_for_status()
        # a storm against machines at rest: not beside the conductor's enrolment
        # of 10,000 machines, which holds SQLite's write lock much of the time
        server.wait_enrolled()
        tokens = machine_tokens(server, ids, IFACE)
        paths = [f"/boot/{mid}/{IFACE}/{tokens[mid]}/boot.ipxe" for mid in ids]
        iso_url, iso_path = partition_iso(server, "bench", IFACE)
        iso = iso_url.split(boot_url, 1)[1]
        return server, paths, iso, iso_path, boot_port
    except BaseException:
        server.stop()
        raise


def write_static(server, paths, iso, iso_path, root):
    """The bytes metalboot serves, as files under ``root`` at the same paths."""
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=16))

    def fetch(path):
        r = session.get(server.url + path, timeout=60)
        r.raise_for_status()
        target = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(r.content)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(fetch, paths))
    target = os.path.join(root, iso.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(iso_path, target)
    # the served ISO is the built file, byte for byte
    r = session.get(server.url + iso, headers={"Range": "bytes=0-1023"}, timeout=60)
    with open(iso_path, "rb") as f:
        assert r.status_code == 206 and r.content == f.read(1024), r.status_code


def prepare_host():
    """wrk and nginx present, and file descriptors for 500 connections and the
    server's (more than a default 1024 soft limit allows)."""
    for tool in ("wrk", "nginx"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found (Debian: apt-get install wrk nginx-light)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))


def result_row(label, r):
    """A row of the storm table for one server's wrk run."""
    return (label, r["name"], r["requests"], fmt(r["rps"]), fmt(r["mbps"]), fmt(r["p50"], " ms"),
            fmt(r["p99"], " ms"), r["errors"], fmt(r["server_cores"]), fmt(r["wrk_cores"]))


STORM_COLUMNS = ["workload", "server", "requests", "req/s", "MB/s", "p50", "p99", "errors",
                 "server cores", "wrk cores"]


def run(count=10000, connections=500, duration=15, range_kib=256, quick=False,
        also_api=False, workers=1):
    """``duration`` is the ISO run's; the scripts run takes twice as long, so that
    every machine is answered several times. ``also_api``: measure
    metalboot-server's Flask endpoints too (the server before the boot server)."""
    if quick:
        count, connections, duration = 300, 50, 2
    prepare_host()
    work = tempfile.mkdtemp(prefix="metalboot-bench-storm-")
    os.chmod(work, 0o755)  # nginx's worker runs as www-data
    root = os.path.join(work, "www")
    lua = os.path.join(work, "rotate.lua")
    with open(lua, "w") as f:
        f.write(WRK_LUA)
    load = loadavg()
    results = {}
    server = nginx = boot = None
    evidence = None
    try:
        server, paths, iso, iso_path, boot_port = setup_metalboot(count, workers)
        write_static(server, paths, iso, iso_path, root)
        scripts_file = os.path.join(work, "scripts.txt")
        with open(scripts_file, "w") as f:
            f.write("\n".join(paths) + "\n")
        iso_file = os.path.join(work, "iso.txt")
        with open(iso_file, "w") as f:
            f.write(iso + "\n")
        size = os.path.getsize(iso_path)
        nginx = Nginx(root, workers)
        boot = BootServer(server, boot_port)
        for path in (paths[0], paths[-1], iso):  # the same bytes at the same paths
            a, b = requests.get(boot.url + path), requests.get(nginx.url + path)
            assert a.status_code == b.status_code == 200 and a.content == b.content, path
        servers = [("metalboot", boot.url, boot.pids)]
        if also_api:
            servers.append(("metalboot-server", server.url, lambda: [server.proc.pid]))
        servers.append(("nginx", nginx.url, nginx.pids))
        for kind, paths_file, rng, seconds in (
                ("scripts", scripts_file, 0, 2 * duration),
                ("iso", iso_file, range_kib * 1024, duration)):
            results[kind] = []
            for name, url, pids in servers:
                before = evidence_count(server) if kind == "scripts" else 0
                results[kind].append(measure(name, url, pids(), paths_file, lua, connections,
                                             seconds, rng, size))
                if kind == "scripts" and name == "metalboot":
                    evidence = evidence_count(server) - before
        boot.stop()
        rows_committed, transactions = boot.committed()
        snapshots_read, snapshots_kept = boot.snapshots()
    finally:
        if boot is not None:
            boot.stop()
        if nginx is not None:
            nginx.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    summary = []
    targets = {"scripts": ("rps", 0.25, "req/s"), "iso": ("mbps", 0.6, "MB/s")}
    for kind, label in (("scripts", f"boot.ipxe of {count} machines"),
                        ("iso", f"ISO ({size / 1e6:.1f} MB) in {range_kib} KiB ranges")):
        m, n = results[kind][0], results[kind][-1]
        rows += [result_row(label, r) for r in results[kind]]
        key, target, unit = targets[kind]
        ratio = m[key] / n[key]
        rows.append((label, "ratio metalboot/nginx", "", fmt(m["rps"] / n["rps"], "x"),
                     fmt(m["mbps"] / n["mbps"], "x"), fmt(m["p50"] / n["p50"], "x"),
                     fmt(m["p99"] / n["p99"], "x"), "", "", ""))
        summary.append(("bootstorm", f"{kind}: {unit} ({connections} conns)",
                        fmt(m[key]), fmt(n[key]) + " (nginx)", fmt(ratio, "x"),
                        f">= {target}x", verdict(ratio >= target)))
        summary.append(("bootstorm", f"{kind}: p99", fmt(m["p99"], " ms"),
                        fmt(n["p99"], " ms") + " (nginx)", fmt(m["p99"] / n["p99"], "x"), "",
                        ""))
    table(f"Boot storm: wrk, {connections} connections, 2 threads, {2 * duration} s per "
          f"scripts run, {duration} s per ISO run; metalboot = metalboot-boot-server "
          f"({workers} process(es)); nginx {workers} worker(s); load average before: "
          f"{load:.2f}, after: {loadavg():.2f}", STORM_COLUMNS, rows)
    answered = results["scripts"][0]["requests"]
    print(f"boot evidence: {evidence} rows committed during the scripts run for {answered} "
          f"answers wrk counted (it does not count those in flight when it stops); "
          f"{rows_committed} rows in {transactions} transactions over the boot server's "
          f"life ({rows_committed / max(transactions, 1):.1f} rows per transaction)")
    print(f"machine snapshots over the boot server's life: {snapshots_read} read from the "
          f"database, {snapshots_kept} kept after a check of their revisions")
    if evidence < answered:
        raise RuntimeError(f"{answered - evidence} answered fetches have no evidence")
    for kind in ("scripts", "iso"):
        for r in results[kind]:
            if r["errors"]:
                print(f"warning: {kind} against {r['name']}: {r['errors']} errors")
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10000)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--range-kib", type=int, default=256)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes of metalboot-boot-server and of nginx alike")
    parser.add_argument("--also-api", action="store_true",
                        help="measure metalboot-server's Flask artifact endpoints too")
    args = parser.parse_args(argv)
    summary = run(args.machines, args.connections, args.duration, args.range_kib, args.quick,
                  args.also_api, args.workers)
    table("Boot storm summary", SUMMARY_HEADER, summary)


if __name__ == "__main__":
    main()
