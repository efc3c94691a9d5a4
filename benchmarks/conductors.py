"""Two conductors versus one, on PostgreSQL, for the same migration.

A real PostgreSQL (tests/pgserver.py: Debian's binaries, a temporary cluster on
127.0.0.1), one metalboot-api process and 1 or 2 metalboot-conductor
processes (each its own ``[DEFAULT] host``, the same ``[conductor] workers``,
all sharing ``[api] public_url`` = the API). ``--machines`` machines migrate
from ``fake`` to ``fake-alt``; every plugin call sleeps ``fake_delay`` (a BMC's
latency). The migration's max_parallel is high enough that the conductors'
worker threads, not the migration, are the limit. Simulated machines (a tail of
the shared fake console log, in this process) fetch their boot.ipxe from the
API as soon as they are activated.

Each run gets a fresh database and fresh processes; throughput is machines / wall
time from POST /v1/migrations until it finished. Target: 2 conductors >= 1.7x
the throughput of 1.
"""

import argparse
import os
import shutil
import tempfile

from benchmarks.common import (SUMMARY_HEADER, MetalbootServer, cpu_seconds, fmt, loadavg, mac,
                               machine_id, table, verdict)
from benchmarks.migration import ConsoleTail, run_migration

CALLS_PER_MACHINE = 4  # validate, prepare, activate (target), clean_up (source)


def conductor_conf(console, workers):
    return (f"enabled_boot_interfaces = fake,fake-alt\n[fake]\nrecord_events = false\n"
            f"console_log = {console}\n[conductor]\nworkers = {workers}\npoll_interval = 0.2\n"
            f"drift_check_interval = 0\n")


def one_run(postgres, conductors, count, workers, delay, max_parallel):
    workdir = tempfile.mkdtemp(prefix="metalboot-bench-conductors-")
    console = os.path.join(workdir, "console.log")
    url = postgres.create_database()
    procs = []
    tail = None
    try:
        key_file = os.path.join(workdir, "bmc-password.key")  # one for all processes
        api = MetalbootServer(extra_conf=conductor_conf(console, workers),
                              workdir=os.path.join(workdir, "api"),
                              command="metalboot_framework.cmd.api", database_url=url,
                              password_key_file=key_file)
        procs.append(api)
        s = api.session
        s.post(api.url + "/v1/partitions", json={"id": "bench"}).raise_for_status()
        for start in range(0, count, 10000):
            s.post(api.url + "/v1/machines", json=[
                {"id": machine_id(i), "partition": "bench", "nics": [{"mac": mac(i)}],
                 "properties": {"fake_delay": delay}}
                for i in range(start, min(count, start + 10000))], timeout=300
            ).raise_for_status()
        for n in range(conductors):
            procs.append(MetalbootServer(
                extra_conf=conductor_conf(console, workers),
                workdir=os.path.join(workdir, f"conductor{n}"),
                command="metalboot_framework.cmd.conductor", database_url=url,
                public_url=api.url, host=f"bench-conductor-{n}",
                password_key_file=key_file))
        api.wait_enrolled()  # the conductors enrol the machines first
        tail = ConsoleTail(console, workers=32)
        cpu0 = {p.proc.pid: cpu_seconds(p.proc.pid) for p in procs}
        m = run_migration(api, None, max_parallel, timeout=3600, tail=tail)
        wall = m["seconds"]
        cpu = {p.proc.pid: cpu_seconds(p.proc.pid) - cpu0[p.proc.pid] for p in procs}
        tail.stop()
        tail = None
        if m["counts"] != {"done": count}:
            raise RuntimeError(f"migration ended with {m['counts']}; logs in {workdir}")
        return {"wall": wall, "rate": count / wall, "api_cpu": cpu[api.proc.pid],
                "conductor_cpu": sum(cpu[p.proc.pid] for p in procs[1:])}
    finally:
        if tail is not None:
            tail.stop()
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(count=10000, workers=32, delay=0.2, max_parallel=1000, quick=False):
    if quick:
        count, workers, delay, max_parallel = 60, 8, 0.02, 60
    from tests.pgserver import PostgresServer
    load = loadavg()
    postgres = PostgresServer().start()
    try:
        one = one_run(postgres, 1, count, workers, delay, max_parallel)
        two = one_run(postgres, 2, count, workers, delay, max_parallel)
    finally:
        postgres.stop()
    ideal1 = workers / (CALLS_PER_MACHINE * delay)
    rows = []
    for name, r, n in (("1 conductor", one, 1), ("2 conductors", two, 2)):
        rows.append((name, fmt(r["wall"], " s"), fmt(r["rate"]), fmt(ideal1 * n),
                     fmt(r["conductor_cpu"] / count * 1000, " ms"),
                     fmt(r["api_cpu"] / count * 1000, " ms")))
    ratio = two["rate"] / one["rate"]
    rows.append(("ratio 2/1", fmt(one["wall"] / two["wall"], "x"), fmt(ratio, "x"), "2.00x",
                 "", ""))
    table(f"Conductors on PostgreSQL: {count} machines fake -> fake-alt, "
          f"{int(delay * 1000)} ms per plugin call, [conductor] workers {workers} per "
          f"conductor, max_parallel {max_parallel}; load average before: {load:.2f}",
          ["run", "wall", "machines/s", "ideal machines/s", "conductor CPU/machine",
           "API CPU/machine"], rows)
    print(f"target: 2 conductors >= 1.7x the throughput of 1: {verdict(ratio >= 1.7)}")
    return [("conductors", f"{count} machines, PostgreSQL: machines/s",
             fmt(two["rate"]) + " (2 cond.)", fmt(one["rate"]) + " (1 cond.)",
             fmt(ratio, "x"), ">= 1.7x", verdict(ratio >= 1.7))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--max-parallel", type=int, default=1000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    summary = run(args.machines, args.workers, args.delay, args.max_parallel, args.quick)
    table("Conductors summary", SUMMARY_HEADER, summary)


if __name__ == "__main__":
    main()
