"""Migration against real Redfish servers: 1,000 machines on 10 sushy-tools emulators.

Each emulator is a stock sushy-tools emulator process (fake driver, 100 systems,
a fresh state directory), run through the functional tests' wrapper
``tests/functional/redfish/sushy_emulator_with_http_boot_uri.py`` -- the same
emulator with power changes applied after 0.2-0.6 s instead of 1-11 s and
BootSourceOverrideEnabled stored as sent. On InsertMedia the emulator
downloads the image synchronously, like a BMC that copies the ISO.

1. metalboot: one metalboot-server migrates all machines from ``fake`` to
   ``redfish-virtual-media-ipxe`` (max_parallel = [conductor] workers =
   ``--parallel``). Simulated machines, in this process, follow the event feed;
   after metalboot's reset of a system they read the emulator's state (power On,
   override Cd, CD inserted) and, like iPXE running the ISO's autoexec.ipxe,
   fetch boot.ipxe by MAC: the boot evidence. Wall time from POST /v1/migrations
   until the migration finished, every machine ``done``.
2. bare script: fresh emulators; a ThreadPoolExecutor of ``--parallel`` threads
   makes, per system, the sushy calls of a hand-written migration: read the
   virtual media, eject what is inserted, insert the same ISO (served by nginx
   from a file), set the boot override Cd / Once / UEFI, ForceRestart, and poll
   PowerState every 0.25 s until On (what metalboot's reset waits for too).

Also printed: the Redfish requests per machine each side made, in all, per
method and per endpoint, and the resets per machine, counted from a log the
emulator wrapper writes of every request (method and path). Targets:
metalboot's wall time within 1.3x of the bare script's; exactly one reset per
activation; no more requests than the bare script. Then the same counts per
vendor, on the vendor mock BMC (``benchmarks/redfish_vendors.py``).
"""

import argparse
import collections
import concurrent.futures
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import requests
import sushy

from benchmarks.common import (SUMMARY_HEADER, MetalbootServer, cpu_seconds, fmt, free_port,
                               loadavg, mac, machine_id, partition_iso, peak_rss_mb, table,
                               verdict)
from metalboot_framework.cli.demo.emulator import emulator_config

VMEDIA = "redfish-virtual-media-ipxe"
IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPPER = os.path.join(ROOT, "tests", "functional", "redfish",
                       "sushy_emulator_with_http_boot_uri.py")
POLL = 0.25
RESET = "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset"
SYSTEM_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Emulators:
    """``count`` sushy-emulator processes with ``per`` systems each."""

    def __init__(self, workdir, count, per, offset=0):
        self.emulators = []  # (url, proc, log path)
        self.systems = {}  # machine id -> (emulator url, system uuid, mac)
        try:
            ports = [free_port() for _ in range(count)]
            # machine n is on emulator n % count: work taken in id order (by metalboot's
            # scheduler or the bare script's pool) is spread over all emulators
            systems = {e: [] for e in range(count)}
            for n in range(offset, offset + count * per):
                e = n % count
                systems[e].append({"uuid": machine_id(n), "name": f"bench-{n}",
                                   "power_state": "On", "boot_mode": "UEFI",
                                   "external_notifier": False,
                                   "nics": [{"mac": mac(n), "ip": "127.0.0.2"}]})
                self.systems[machine_id(n)] = (f"http://127.0.0.1:{ports[e]}", machine_id(n),
                                               mac(n))
            for e, port in enumerate(ports):
                d = os.path.join(workdir, f"emulator{e}")
                os.makedirs(os.path.join(d, "state"))
                os.makedirs(os.path.join(d, "tmp"))
                conf = os.path.join(d, "emulator.conf")
                with open(conf, "w") as f:
                    f.write(emulator_config(port, os.path.join(d, "state"), systems[e])
                            + "SUSHY_EMULATOR_POWER_DELAY = (0.2, 0.6)\n")
                log_path = os.path.join(d, "emulator.log")
                with open(log_path, "ab") as log:
                    # downloaded media land in TMPDIR: keep them in the work dir
                    proc = subprocess.Popen(
                        [sys.executable, WRAPPER, "--config", conf], stdout=log, stderr=log,
                        cwd=d, env=dict(os.environ, TMPDIR=os.path.join(d, "tmp"),
                                        METALBOOT_EMULATOR_REQUEST_LOG=os.path.join(
                                            d, "requests.log")))
                self.emulators.append((f"http://127.0.0.1:{port}", proc, log_path))
            for url, proc, log_path in self.emulators:
                deadline = time.monotonic() + 60
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(f"sushy-emulator exited; see {log_path}")
                    try:
                        if requests.get(url + "/redfish/v1/", timeout=2).status_code == 200:
                            break
                    except requests.RequestException:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"sushy-emulator not up; see {log_path}")
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def cpu(self):
        return sum(cpu_seconds(proc.pid) for _, proc, _ in self.emulators)

    def requests_made(self):
        """Counter of (method, path with the system's id as {id}) of every request."""
        made = collections.Counter()
        for _, _, log_path in self.emulators:
            requests_log = os.path.join(os.path.dirname(log_path), "requests.log")
            if not os.path.exists(requests_log):
                continue
            with open(requests_log) as f:
                for line in f:
                    method, _, path = line.rstrip("\n").partition(" ")
                    if path.startswith("/redfish/"):
                        made[method, SYSTEM_ID_RE.sub("{id}", path.rstrip("/"))] += 1
        return made

    def stop(self):
        for _, proc, _ in self.emulators:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in self.emulators:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


class SimulatedMachines:
    """The firmware and iPXE of each machine, triggered by metalboot's reset events."""

    CHAIN_RE = re.compile(r"\bchain\s+(\S+)")
    MAC_RE = re.compile(r"\$\{net\$\{idx\}/mac\}|\$\{net\d+/mac\}")

    def __init__(self, server, systems, workers):
        self.server = server
        self.systems = systems
        self.pool = concurrent.futures.ThreadPoolExecutor(workers)
        self.session = requests.Session()
        self.session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=workers,
                                                                    pool_connections=32))
        self.chain = {}  # ISO URL -> chain URL template (from its autoexec.ipxe)
        self.chain_lock = threading.Lock()
        self.booted = 0
        self.bmc_reads = collections.Counter()  # the simulated firmware's own requests
        self.failed = []
        self._stop = threading.Event()
        self.cursor = 0
        body = server.session.get(server.url + "/v1/events", params={"since": 0, "limit": 1000}
                                  ).json()
        while body["events"]:
            self.cursor = body["next_cursor"]
            body = server.session.get(server.url + "/v1/events",
                                      params={"since": self.cursor, "limit": 1000}).json()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self):
        while not self._stop.is_set():
            try:
                body = self.server.session.get(self.server.url + "/v1/events", params={
                    "since": self.cursor, "limit": 1000}, timeout=30).json()
            except requests.RequestException:
                self._stop.wait(0.2)
                continue
            for event in body["events"]:
                if event["kind"] == f"{VMEDIA}.reset" and event.get("machine_id") in \
                        self.systems:
                    self.pool.submit(self._boot, event["machine_id"])
            self.cursor = body["next_cursor"]
            if not body["events"]:
                self._stop.wait(0.1)

    def _chain_template(self, image):
        with self.chain_lock:
            if image not in self.chain:
                from metalboot_framework.cli.demo.firmware import autoexec_from_iso
                iso = self.session.get(image, timeout=60)
                iso.raise_for_status()
                match = self.CHAIN_RE.search(autoexec_from_iso(iso.content))
                self.chain[image] = match.group(1) if match else None
            return self.chain[image]

    def _boot(self, mid):
        url, uuid, nic = self.systems[mid]
        try:
            system_path = f"{url}/redfish/v1/Systems/{uuid}"
            system = self.session.get(system_path, timeout=30).json()
            cd = self.session.get(system_path + "/VirtualMedia/Cd", timeout=30).json()
            with self.chain_lock:
                self.bmc_reads.update([("GET", "/redfish/v1/Systems/{id}"),
                                       ("GET", "/redfish/v1/Systems/{id}/VirtualMedia/Cd")])
            boot = system.get("Boot") or {}
            if system.get("PowerState") != "On" or boot.get("BootSourceOverrideTarget") != \
                    "Cd" or not cd.get("Inserted") or not cd.get("Image"):
                raise RuntimeError(f"nothing to boot: {system.get('PowerState')} "
                                   f"{boot.get('BootSourceOverrideTarget')} {cd.get('Image')}")
            template = self._chain_template(cd["Image"])
            r = self.session.get(self.MAC_RE.sub(nic, template), timeout=60)
            r.raise_for_status()
            self.booted += 1
        except Exception as exc:  # a machine that fails to boot just does not boot
            self.failed.append((mid, repr(exc)))

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self.pool.shutdown(cancel_futures=True)


def server_conf(parallel):
    return (f"enabled_boot_interfaces = fake,{VMEDIA}\ndefault_boot_interface = fake\n"
            f"[fake]\nrecord_events = false\n"
            f"[conductor]\nworkers = {parallel}\npoll_interval = 0.2\n"
            f"drift_check_interval = 0\n"
            f"[bmc]\nconnect_timeout = 10\nread_timeout = 120\nretry_attempts = 3\n"
            f"retry_interval = 0.2\nretry_max_interval = 1\n"
            f"power_poll_interval = {POLL}\npower_timeout = 120\n"
            f"post_retry_interval = 0.5\npost_retry_timeout = 10\n"
            f"[redfish]\nipxe_efi_path = {IPXE_EFI}\n"
            # the simulated machines fetch boot.ipxe by MAC from loopback
            f"[artifacts]\nboot_network_prefixes = 127.0.0.0/8\n")


def metalboot_run(workdir, emulators, per, parallel):
    count = emulators * per
    emus = Emulators(os.path.join(workdir, "metalboot"), emulators, per)
    server = sim = None
    try:
        server = MetalbootServer(extra_conf=server_conf(parallel),
                                 workdir=os.path.join(workdir, "server"))
        s = server.session
        s.post(server.url + "/v1/partitions", json={"id": "bench", "boot": {
            "kernel_url": "http://images.example/metal-hammer/vmlinuz",
            "initrd_url": "http://images.example/metal-hammer/initrd.img",
            "cmdline": "console=ttyS0", "metal_hammer_version": "v0.13.0"}}).raise_for_status()
        s.post(server.url + "/v1/machines", json=[
            {"id": mid, "partition": "bench", "nics": [{"mac": nic}], "boot_interface": "fake",
             "boot_mode": "uefi", "bmc": {"address": url, "username": "admin",
                                          "password": "bench-password", "verify_tls": False},
             "properties": {"redfish_system_id": uuid}}
            for mid, (url, uuid, nic) in emus.systems.items()], timeout=300).raise_for_status()
        # the ISO is built once per partition; build it before the clock starts, as
        # the bare script gets it ready-made
        iso_url, iso_path = partition_iso(server, "bench", VMEDIA)
        before = emus.requests_made()
        sim = SimulatedMachines(server, emus.systems, workers=64)
        cpu0 = (cpu_seconds(server.proc.pid), emus.cpu(), own_cpu())
        t0 = time.perf_counter()
        r = s.post(server.url + "/v1/migrations", json={
            "selector": {"partition": "bench"}, "boot_interface": VMEDIA,
            "max_parallel": parallel, "boot_timeout": 600}, timeout=300)
        r.raise_for_status()
        mig = r.json()["id"]
        while True:
            m = s.get(f"{server.url}/v1/migrations/{mig}", timeout=60).json()
            if m["finished_at"]:
                break
            if time.perf_counter() - t0 > 3600:
                raise RuntimeError(f"migration not finished after an hour: {m['counts']}")
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        cpu = (cpu_seconds(server.proc.pid) - cpu0[0], emus.cpu() - cpu0[1], own_cpu() - cpu0[2])
        rss = peak_rss_mb(server.proc.pid)
        sim.stop()
        calls = emus.requests_made() - before - sim.bmc_reads
        if m["counts"] != {"done": count}:
            raise RuntimeError(f"migration ended with {m['counts']}; simulated boot failures: "
                               f"{sim.failed[:3]}; logs in {workdir}")
        return wall, calls, rss, iso_path, cpu
    finally:
        if sim is not None:
            sim.stop()
        if server is not None:
            server.stop()
        emus.stop()


class StaticServer:
    """python -m http.server: the ISO's server for the bare script where nginx is missing."""

    def __init__(self, root):
        from benchmarks.common import wait_http
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                      "--directory", root, str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_http(self.url + "/", self.proc)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def retried(call, *args, retry_on=(), **kwargs):
    """A 5xx or a lost connection is tried again (3 attempts, 0.2 s then 0.4 s apart),
    as metalboot's [bmc] retry settings here do: the emulator answers 500 "database
    is locked" now and then under load."""
    for attempt in range(3):
        try:
            return call(*args, **kwargs)
        except (sushy.exceptions.ServerSideError, sushy.exceptions.ConnectionError) + retry_on:
            if attempt == 2:
                raise
            time.sleep(0.2 * 2 ** attempt)


def bare_machine(conn, uuid, iso_url):
    system = retried(conn.get_system, f"/redfish/v1/Systems/{uuid}")
    members = retried(system.virtual_media.get_members)
    for vm in members:
        if vm.inserted or vm.image:
            retried(vm.eject_media)
    cd = next(vm for vm in members if sushy.VirtualMediaType.CD in vm.media_types)
    # sushy 5.x's insert_media raises TypeError on a 500 without error detail
    retried(cd.insert_media, iso_url, inserted=True, write_protected=True,
            retry_on=(TypeError,))
    retried(system.set_system_boot_options, sushy.BootSource.CD,
            enabled=sushy.BootSourceOverrideEnabled.ONCE,
            mode=sushy.BootSourceOverrideMode.UEFI)
    retried(system.reset_system, sushy.ResetType.FORCE_RESTART)
    while True:
        time.sleep(POLL)
        retried(system.refresh)
        if system.power_state == sushy.PowerState.ON:
            return


def own_cpu():
    t = os.times()
    return t.user + t.system


def nginx_pids(server):
    return server.pids() if hasattr(server, "pids") else [server.proc.pid]


def bare_run(workdir, emulators, per, parallel, iso_path):
    from benchmarks.bootstorm import Nginx
    www = os.path.join(workdir, "www")
    os.makedirs(www)
    os.chmod(workdir, 0o755)
    os.chmod(www, 0o755)
    shutil.copyfile(iso_path, os.path.join(www, os.path.basename(iso_path)))
    os.chmod(os.path.join(www, os.path.basename(iso_path)), 0o644)
    nginx = Nginx(www) if shutil.which("nginx") else StaticServer(www)
    emus = None
    try:
        iso_url = f"{nginx.url}/{os.path.basename(iso_path)}"
        requests.get(iso_url, timeout=10).raise_for_status()
        emus = Emulators(os.path.join(workdir, "bare"), emulators, per)
        before = emus.requests_made()
        cpu0 = (sum(cpu_seconds(p) for p in nginx_pids(nginx)), emus.cpu(), own_cpu())
        t0 = time.perf_counter()
        conns, lock = {}, threading.Lock()

        def connection(url):
            with lock:  # one connection per BMC, opened on first use, like metalboot's
                if url not in conns:
                    conns[url] = sushy.Sushy(url, auth=sushy.auth.BasicAuth(
                        "admin", "bench-password"), verify=False)
                return conns[url]

        def one(item):
            url, uuid, _ = item
            bare_machine(connection(url), uuid, iso_url)

        with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
            list(pool.map(one, emus.systems.values()))
        wall = time.perf_counter() - t0
        cpu = (sum(cpu_seconds(p) for p in nginx_pids(nginx)) - cpu0[0], emus.cpu() - cpu0[1],
               own_cpu() - cpu0[2])
        calls = emus.requests_made() - before
        return wall, calls, cpu
    finally:
        if emus is not None:
            emus.stop()
        nginx.stop()


def run(emulators=10, per=100, parallel=100, quick=False):
    if quick:
        emulators, per, parallel = 2, 5, 10
    count = emulators * per
    # an emulator holds a socket (and a thread) per request in flight, and a file per
    # download: more than a default soft limit of 1024 descriptors under load
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    workdir = tempfile.mkdtemp(prefix="metalboot-bench-redfish-")
    load = loadavg()
    ok = False
    try:
        m_wall, m_made, rss, iso_path, m_cpu = metalboot_run(workdir, emulators, per, parallel)
        m_calls = m_made.total() / count
        print(f"redfish: metalboot migrated {count} machines in {m_wall:.2f} s "
              f"({m_calls:.1f} Redfish requests per machine)", flush=True)
        keep = os.path.join(workdir, "ipxe.iso")
        shutil.copyfile(iso_path, keep)
        b_wall, b_made, b_cpu = bare_run(workdir, emulators, per, parallel, keep)
        b_calls = b_made.total() / count
        ok = True
    finally:
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"redfish benchmark failed; logs kept in {workdir}", file=sys.stderr)
    ratio = m_wall / b_wall
    table(f"Redfish: {count} machines on {emulators} sushy-tools emulators ({per} systems "
          f"each), fake -> {VMEDIA}, parallelism {parallel}; load average before: {load:.2f}",
          ["run", "wall", "machines/s", "Redfish requests/machine", "CPU: server",
           "CPU: emulators", "CPU: this process", "server peak RSS"],
          [("metalboot migration (simulated boots by MAC)", fmt(m_wall, " s"),
            fmt(count / m_wall), fmt(m_calls), fmt(m_cpu[0], " s"), fmt(m_cpu[1], " s"),
            fmt(m_cpu[2], " s"), fmt(rss, " MB")),
           ("bare sushy script (ThreadPoolExecutor; ISO on nginx)", fmt(b_wall, " s"),
            fmt(count / b_wall), fmt(b_calls), fmt(b_cpu[0], " s"), fmt(b_cpu[1], " s"),
            fmt(b_cpu[2], " s"), ""),
           ("ratio metalboot/bare", fmt(ratio, "x"), "", fmt(m_calls / b_calls, "x"),
            "", fmt(m_cpu[1] / b_cpu[1], "x"), "", "")])
    print("(Redfish requests: made by metalboot or the bare script, counted in the emulators' "
          "logs; the simulated firmware's own reads are left out. CPU: server = "
          "metalboot-server or nginx; this process = the simulated machines or the bare "
          "script.)")
    table("Redfish requests per machine, per endpoint", ["request", "metalboot", "bare script"],
          [(f"{method} {path}", fmt(m_made[method, path] / count),
            fmt(b_made[method, path] / count))
           for method, path in sorted(set(m_made) | set(b_made),
                                      key=lambda k: -(m_made[k] + b_made[k]))])
    methods = sorted({method for method, _ in set(m_made) | set(b_made)})
    table("Redfish requests per machine, per method", ["method", "metalboot", "bare script"],
          [(method, fmt(sum(n for (m, _), n in m_made.items() if m == method) / count),
            fmt(sum(n for (m, _), n in b_made.items() if m == method) / count))
           for method in methods])
    m_resets, b_resets = m_made["POST", RESET] / count, b_made["POST", RESET] / count
    print(f"resets per machine: metalboot {m_resets:.2f}, bare script {b_resets:.2f}; "
          f"target exactly one per activation: {verdict(m_resets == 1)}")
    print(f"requests per machine: metalboot {m_calls:.2f}, bare script {b_calls:.2f}; "
          f"target no more than the bare script: {verdict(m_calls <= b_calls)}")
    print(f"target: within 1.3x of the bare script: {verdict(ratio <= 1.3)}")
    return [("redfish", f"{count} machines, {emulators} emulators: wall", fmt(m_wall, " s"),
             fmt(b_wall, " s") + " (bare sushy)", fmt(ratio, "x"), "<= 1.3x",
             verdict(ratio <= 1.3)),
            ("redfish", "resets per machine", fmt(m_resets), fmt(b_resets) + " (bare sushy)",
             "", "exactly 1", verdict(m_resets == 1)),
            ("redfish", "Redfish requests per machine", fmt(m_calls),
             fmt(b_calls) + " (bare sushy)", fmt(m_calls / b_calls, "x"), "<= bare",
             verdict(m_calls <= b_calls))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--emulators", type=int, default=10)
    parser.add_argument("--systems-per-emulator", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--vendor-machines", type=int, default=5,
                        help="machines per vendor and interface on the vendor mock BMC "
                             "(benchmarks/redfish_vendors.py); 0: leave that part out")
    args = parser.parse_args(argv)
    summary = run(args.emulators, args.systems_per_emulator, args.parallel, args.quick)
    table("Redfish summary", SUMMARY_HEADER, summary)
    if args.vendor_machines:
        from benchmarks import redfish_vendors
        redfish_vendors.run(args.vendor_machines)


if __name__ == "__main__":
    main()
