"""Migration benchmark: 10,000 machines moved from ``fake`` to ``fake-alt``.

Simulated machines (a tail of the fake plugin's console log, in this process)
fetch their boot.ipxe over HTTP as soon as they are activated.

1. CPU: the server's CPU time per migrated machine, side by side with a
   baseline run on the same server that only serves the same 10,000 boot.ipxe
   fetches. The difference is what the conductor costs per machine
   (target: under 5 ms).
2. Latency: every plugin call sleeps 200 ms (a BMC's latency); the wall time
   of the migration against the ideal, calls per machine x 200 ms x machines /
   max_parallel (target at max_parallel 500: within 1.2x with coroutine steps,
   1.25x with blocking steps, 1.05x with 1 s per call). The simulated
   machines fetch from a metalboot-boot-server beside the metalboot-server.
"""

import argparse
import asyncio
import concurrent.futures
import datetime
import os
import shutil
import tempfile
import threading
import time
import urllib.parse

import requests

from benchmarks.common import (BootServer, HostSteal, MetalbootServer, cpu_probe, cpu_seconds,
                               fmt, free_port, peak_rss_mb, table)

CALLS_PER_MACHINE = 4  # validate, prepare, activate (target), clean_up (source)


def machine(n, delay):
    body = {"id": f"00000000-0000-4000-8000-{n:012x}", "partition": "bench",
            "nics": [{"mac": "52:54:%02x:%02x:%02x:%02x" % (
                (n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255)}]}
    if delay:
        body["properties"] = {"fake_delay": delay}
    return body


class ConsoleTail:
    """Boots machines as their activation lines appear in the console log.

    A simulated machine is to answer at once, so that what the benchmark
    measures is metalboot's overhead, not the simulator's: an event loop in a
    thread of its own reads the file every millisecond and fetches each
    machine's URL over one of its kept-alive connections, at most ``workers``
    at a time (each fetch waits for its evidence to be committed). A slower
    poll, or a pool of threads that must each get this process's GIL, would
    make every boot late by more than metalboot's own overhead.

    A kept-alive connection that the server has closed meanwhile (granian
    closes one idle for 30 s) is replaced and the request sent again, as every
    HTTP client does; a fetch that still fails is counted in :attr:`failed`
    and its reason kept in :attr:`failures` (a simulated machine does not
    retry, so the migration would wait for its boot timeout).
    """

    POLL = 0.001  # seconds between reads of the file when nothing is new

    def __init__(self, path, workers=32):
        self.path = path
        self.workers = workers
        self.booted = 0
        self.failed = 0
        self.failures = []  # (url, reason) of the first failed fetches
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="console-tail")
        self._thread.start()

    def _run(self):
        try:
            import uvloop
            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._tail())
        finally:
            loop.close()

    async def _tail(self):
        while not os.path.exists(self.path):
            await asyncio.sleep(0.01)
        slots = asyncio.Semaphore(self.workers)
        idle = {}  # (host, port) -> [(reader, writer)]
        booting = set()
        with open(self.path) as f:
            buf = ""
            while not self._stop.is_set():
                chunk = f.read()
                if not chunk:
                    await asyncio.sleep(self.POLL)
                    continue
                buf += chunk
                *lines, buf = buf.split("\n")
                for line in lines:
                    task = asyncio.ensure_future(self._boot(line.split(" ", 1)[1], slots, idle))
                    booting.add(task)
                    task.add_done_callback(booting.discard)
        if booting:
            await asyncio.wait(booting)
        for conns in idle.values():
            for _, writer in conns:
                writer.close()

    async def _boot(self, url, slots, idle):
        async with slots:
            try:
                status = await self._get(url, idle)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                status = f"{type(exc).__name__}: {exc}"
        if status == 200:
            self.booted += 1
        else:
            self.failed += 1
            if len(self.failures) < 10:
                self.failures.append((url, status))

    @staticmethod
    async def _get(url, idle):
        """GET ``url`` over a kept-alive HTTP/1.1 connection; the status."""
        parts = urllib.parse.urlsplit(url)
        key = (parts.hostname, parts.port)
        pool = idle.setdefault(key, [])
        request = f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
        while True:
            reused = bool(pool)
            reader, writer = pool.pop() if reused else await asyncio.open_connection(*key)
            head = None
            try:
                writer.write(request)
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                status = int(head[0].split(" ", 2)[1])
                headers = dict(line.lower().split(": ", 1) for line in head[1:] if ": " in line)
                if headers.get("transfer-encoding") == "chunked":
                    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                        await reader.readexactly(size + 2)
                    await reader.readuntil(b"\r\n")
                else:
                    await reader.readexactly(int(headers.get("content-length", 0)))
                break
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                writer.close()
                if reused and head is None and not getattr(exc, "partial", b""):
                    continue  # the server closed the idle connection: a new one
                raise
            except BaseException:
                writer.close()
                raise
        if headers.get("connection") == "close":
            writer.close()
        else:
            pool.append((reader, writer))
        return status

    def stop(self):
        self._stop.set()
        self._thread.join()


def register(server, count, delay=0.0):
    s = server.session
    s.post(server.url + "/v1/partitions", json={"id": "bench"}).raise_for_status()
    for start in range(0, count, 10000):
        s.post(server.url + "/v1/machines",
               json=[machine(i, delay) for i in range(start, min(count, start + 10000))],
               timeout=300).raise_for_status()
    server.wait_enrolled()
    return [machine(i, 0)["id"] for i in range(count)]


def run_migration(server, ids, max_parallel, timeout=3600, target="fake-alt", tail=None):
    """POST the migration of the bench partition and wait for it to finish: the
    migration as the API shows it, with ``seconds``: from just before the POST
    to its ``finished_at`` (the server's clock, this host's: not rounded up to
    this function's polls). With ``tail`` (a :class:`ConsoleTail`), stop at the
    first simulated boot that failed: its machine would wait for its boot
    timeout, and the figure would be the simulator's."""
    posted = time.time()
    r = server.session.post(server.url + "/v1/migrations", json={
        "selector": {"partition": "bench"}, "boot_interface": target,
        "max_parallel": max_parallel, "boot_timeout": 600}, timeout=300)
    r.raise_for_status()
    mid = r.json()["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tail is not None and tail.failed:
            raise RuntimeError(f"{tail.failed} simulated boots failed, the first: "
                               f"{tail.failures[:3]}")
        m = server.session.get(f"{server.url}/v1/migrations/{mid}").json()
        if m["finished_at"]:
            finished = datetime.datetime.fromisoformat(m["finished_at"].rstrip("Z")).replace(
                tzinfo=datetime.timezone.utc).timestamp()
            m["seconds"] = finished - posted
            return m
        time.sleep(0.2)
    raise RuntimeError(f"migration not finished after {timeout}s: {m}")


INTERFACES = {"coroutine": ("fake", "fake-alt"), "blocking": ("fake-blocking", "fake-blocking-alt")}


def conf_for(console, workers, steps="coroutine"):
    source, target = INTERFACES[steps]
    return (f"enabled_boot_interfaces = {source},{target}\ndefault_boot_interface = {source}\n"
            f"[fake]\nrecord_events = false\n"
            f"console_log = {console}\n[conductor]\nworkers = {workers}\npoll_interval = 0.2\n"
            f"drift_check_interval = 0\n")


def cpu_run(count, max_parallel):
    # baseline: the same server only serves 10,000 boot.ipxe fetches
    base = MetalbootServer(extra_conf=conf_for("/dev/null", 64))
    try:
        ids = register(base, count)
        from metalboot_framework.store.db import Database
        from metalboot_framework.tokens import TokenSigner
        signer = TokenSigner.from_database(Database(
            f"sqlite:///{os.path.join(base.dir, 'state', 'metalboot.sqlite')}"))
        urls = [f"{base.url}/boot/{mid}/fake-alt/{signer.machine_token(mid, 1, 'fake-alt')}"
                f"/boot.ipxe" for mid in ids]
        session = requests.Session()
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=32))
        cpu0, t0 = cpu_seconds(base.proc.pid), time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            codes = list(pool.map(lambda u: session.get(u, timeout=60).status_code, urls))
        base_cpu, base_wall = cpu_seconds(base.proc.pid) - cpu0, time.perf_counter() - t0
        assert codes.count(200) == count
    finally:
        base.stop()
    workdir = bench_dir()
    console = os.path.join(workdir, "console.log")
    server = MetalbootServer(extra_conf=conf_for(console, 64), workdir=workdir)
    try:
        register(server, count)
        tail = ConsoleTail(console)
        cpu0 = cpu_seconds(server.proc.pid)
        m = run_migration(server, ids, max_parallel, tail=tail)
        cpu, wall = cpu_seconds(server.proc.pid) - cpu0, m["seconds"]
        rss = peak_rss_mb(server.proc.pid)
        tail.stop()
    finally:
        server.stop()
    assert m["counts"] == {"done": count}, m["counts"]
    done_with(workdir)
    per_machine = cpu / count * 1000
    per_fetch = base_cpu / count * 1000
    table(f"Migration CPU: {count} machines fake -> fake-alt, max_parallel {max_parallel}, "
          f"simulated boots over HTTP",
          ["run", "server CPU", "per machine", "wall", "peak RSS"],
          [("migration (conductor + artifact server)", fmt(cpu, " s"),
            fmt(per_machine, " ms"), fmt(wall, " s"), fmt(rss, " MB")),
           ("baseline: the same boot.ipxe fetches only", fmt(base_cpu, " s"),
            fmt(per_fetch, " ms"), fmt(base_wall, " s"), ""),
           ("conductor = difference", fmt(cpu - base_cpu, " s"),
            fmt(per_machine - per_fetch, " ms"), "", "")])
    ok = per_machine - per_fetch < 5
    print(f"target: conductor CPU per machine < 5 ms: {'met' if ok else 'MISSED'}")
    return per_machine - per_fetch


def latency_target(delay, steps):
    """The ratio to the ideal a latency run is to stay within: the closer, the
    longer a plugin call takes (metalboot's own time is then a smaller part)."""
    if delay >= 1.0:
        return 1.05
    return 1.25 if steps == "blocking" else 1.2


def latency_run(count, max_parallel, delay, conductors=1, postgresql=False, steps="coroutine"):
    """metalboot-server (API + conductor) with the machines' fetches served by a
    metalboot-boot-server on the same database, as a site at scale runs them;
    ``conductors`` > 1 adds metalboot-conductor processes on that database;
    ``postgresql``: a fresh database on a PostgreSQL server (tests/pgserver.py)
    instead of the server's SQLite file; ``steps``: the fake interfaces whose
    steps are coroutines (``fake``), or blocking functions (``fake-blocking``,
    as a plugin on sushy: each call in a worker thread)."""
    workdir = bench_dir()
    console = os.path.join(workdir, "console.log")
    boot_port = free_port()
    conf = (conf_for(console, max_parallel, steps)
            + f"[boot_server]\nhost_ip = 127.0.0.1\nport = {boot_port}\n")
    postgres = server = boot = None
    extra = []
    try:
        db_url = f"sqlite:///{os.path.join(workdir, 'state', 'metalboot.sqlite')}"
        if postgresql:
            from tests.pgserver import PostgresServer
            postgres = PostgresServer().start()
            db_url = postgres.create_database()
        key_file = os.path.join(workdir, "state", "bmc-password.key")  # for all processes
        server = MetalbootServer(extra_conf=conf, workdir=workdir,
                                 public_url=f"http://127.0.0.1:{boot_port}",
                                 database_url=db_url if postgresql else None,
                                 password_key_file=key_file)
        boot = BootServer(server, boot_port)
        for n in range(1, conductors):
            extra.append(MetalbootServer(
                extra_conf=conf, workdir=os.path.join(workdir, f"conductor{n}"),
                command="metalboot_framework.cmd.conductor", database_url=db_url,
                public_url=f"http://127.0.0.1:{boot_port}", host=f"bench-conductor-{n}",
                password_key_file=key_file))
        ids = register(server, count, delay=delay)
        tail = ConsoleTail(console, workers=max_parallel)
        cpu0 = cpu_seconds(server.proc.pid)
        probe_before = cpu_probe()
        steal = HostSteal()
        m = run_migration(server, ids, max_parallel, target=INTERFACES[steps][1], tail=tail)
        steal.stop()
        wall = m["seconds"]
        cpu = cpu_seconds(server.proc.pid) - cpu0
        tail.stop()
        probe_after = cpu_probe()
    finally:
        for proc in extra:
            proc.stop()
        if boot is not None:
            boot.stop()
        if server is not None:
            server.stop()
        if postgres is not None:
            postgres.stop()
    assert m["counts"] == {"done": count}, m["counts"]
    done_with(workdir)
    ideal = CALLS_PER_MACHINE * delay * count / max_parallel
    table(f"Migration wall time: {count} machines, {int(delay * 1000)} ms per plugin call, "
          f"max_parallel {max_parallel}, {conductors} conductor process(es) on "
          f"{'PostgreSQL' if postgresql else 'SQLite'}, {steps} steps "
          f"({' -> '.join(INTERFACES[steps])})",
          ["run", "wall", "ideal", "ratio", "server CPU"],
          [("metalboot", fmt(wall, " s"), fmt(ideal, " s"), fmt(wall / ideal, "x"),
            f"{fmt(cpu, ' s')} ({fmt(cpu / wall * 100, '%')} of a core)")])
    target = latency_target(delay, steps)
    print(f"target: within {target}x of ideal: {'met' if wall / ideal <= target else 'MISSED'}")
    print(steal.describe())
    print(f"host: a fixed CPU-bound loop took {probe_before:.3f} s before the run and "
          f"{probe_after:.3f} s after (lower is quieter; compare between runs)")
    return wall / ideal


KEEP = False  # --keep: leave the work directories of successful runs


def bench_dir():
    """A work directory for one run's servers (logs, database, console log); a
    failed run leaves it for a look, a successful one removes it (:func:`done_with`)."""
    workdir = tempfile.mkdtemp(prefix="metalboot-bench-")
    print(f"work directory: {workdir}", flush=True)
    return workdir


def done_with(workdir):
    if KEEP:
        print(f"work directory kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def run(count=10000, max_parallel=500, delay=0.2):
    cpu_run(count, max_parallel)
    latency_run(count, max_parallel, delay)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10000)
    parser.add_argument("--max-parallel", type=int, default=500)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--only", choices=["cpu", "latency"])
    parser.add_argument("--conductors", type=int, default=1,
                        help="conductor processes in the latency run (the server's, plus "
                             "metalboot-conductor processes on its database)")
    parser.add_argument("--steps", choices=sorted(INTERFACES), default="coroutine",
                        help="the latency run's plugin steps: coroutines (fake -> fake-alt) "
                             "or blocking functions run in worker threads (fake-blocking -> "
                             "fake-blocking-alt, as a plugin on sushy)")
    parser.add_argument("--postgresql", action="store_true",
                        help="the latency run on a PostgreSQL server (Debian's binaries, "
                             "tests/pgserver.py) instead of SQLite")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directories (server logs, database) of "
                             "successful runs too")
    args = parser.parse_args(argv)
    global KEEP
    KEEP = args.keep
    if args.only != "latency":
        cpu_run(args.machines, args.max_parallel)
    if args.only != "cpu":
        latency_run(args.machines, args.max_parallel, args.delay, args.conductors,
                    args.postgresql, args.steps)


if __name__ == "__main__":
    main()
