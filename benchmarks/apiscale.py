"""API latency and server memory at 10,000 and 50,000 machines, SQLite and PostgreSQL.

One metalboot-server per database (SQLite in its state directory; a real
PostgreSQL from tests/pgserver.py, a fresh database). Machines are registered
in requests of 10,000; at each size the benchmark pages through the whole
collection with GET /v1/machines?limit=100 (3 passes at 10,000, 1 at 50,000:
300 and 500 requests), then GETs /v1/machines/{id} for 1,000 random machines,
one request at a time, and reads the server's peak RSS (VmHWM). The two
databases are printed side by side, with PostgreSQL/SQLite ratios.

There is no baseline server here: the comparison is SQLite against PostgreSQL
and 10,000 against 50,000. The api benchmark's targets (list p99 < 20 ms,
RSS < 150 MB) are shown as reference.
"""

import argparse
import random
import time

from benchmarks.common import (SUMMARY_HEADER, MetalbootServer, fmt, loadavg, mac, machine_id,
                               peak_rss_mb, percentile, table, verdict)


def body(n):
    return {"id": machine_id(n), "partition": "bench", "nics": [{"mac": mac(n)}],
            "bmc": {"address": f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}",
                    "username": "root", "password": "secret"}}


def page_all(server, passes):
    latencies = []
    for _ in range(passes):
        marker = None
        while True:
            q = "/v1/machines?limit=100" + (f"&marker={marker}" if marker else "")
            t0 = time.perf_counter()
            r = server.session.get(server.url + q, timeout=60)
            latencies.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            marker = r.json()["next_marker"]
            if marker is None:
                break
    return latencies


def get_each(server, count, n=1000):
    rng = random.Random(count)
    latencies = []
    for i in (rng.randrange(count) for _ in range(n)):
        t0 = time.perf_counter()
        r = server.session.get(f"{server.url}/v1/machines/{machine_id(i)}", timeout=60)
        latencies.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return latencies


def measure(server, sizes):
    server.session.post(server.url + "/v1/partitions", json={"id": "bench"}).raise_for_status()
    registered = 0
    results = {}
    for size in sizes:
        t0 = time.perf_counter()
        for start in range(registered, size, 10000):
            server.session.post(server.url + "/v1/machines",
                                json=[body(i) for i in range(start, min(size, start + 10000))],
                                timeout=600).raise_for_status()
        register = time.perf_counter() - t0
        registered = size
        server.wait_enrolled()  # measure the API at rest, not beside 50,000 enrolments
        lst = page_all(server, 3 if size <= 10000 else 1)
        one = get_each(server, size, 1000 if size >= 10000 else 100)
        results[size] = {"register": register, "list_p50": percentile(lst, 50),
                         "list_p99": percentile(lst, 99), "list_n": len(lst),
                         "get_p50": percentile(one, 50), "get_p99": percentile(one, 99),
                         "rss": peak_rss_mb(server.proc.pid)}
    return results


def run(sizes=(10000, 50000), quick=False):
    if quick:
        sizes = (300, 900)
    from tests.pgserver import PostgresServer
    load = loadavg()
    results = {}
    server = MetalbootServer()
    try:
        results["SQLite"] = measure(server, sizes)
    finally:
        server.stop()
    postgres = PostgresServer().start()
    try:
        server = MetalbootServer(database_url=postgres.create_database())
        try:
            results["PostgreSQL"] = measure(server, sizes)
        finally:
            server.stop()
    finally:
        postgres.stop()
    rows = []
    for size in sizes:
        s, p = results["SQLite"][size], results["PostgreSQL"][size]
        for name, r in (("SQLite", s), ("PostgreSQL", p)):
            rows.append((f"{size}", name, fmt(r["register"], " s"), fmt(r["list_p50"], " ms"),
                         fmt(r["list_p99"], " ms"), fmt(r["get_p50"], " ms"),
                         fmt(r["get_p99"], " ms"), fmt(r["rss"], " MB")))
        rows.append((f"{size}", "ratio PostgreSQL/SQLite",
                     *(fmt(p[k] / s[k], "x") for k in ("register", "list_p50", "list_p99",
                                                       "get_p50", "get_p99", "rss"))))
    table(f"API at scale: register, GET /v1/machines?limit=100 over the whole collection, "
          f"GET /v1/machines/{{id}} x1000, peak RSS; load average before: {load:.2f}",
          ["machines", "database", "register (added)", "list p50", "list p99", "get p50",
           "get p99", "peak RSS"], rows)
    summary = []
    for size in sizes:
        s, p = results["SQLite"][size], results["PostgreSQL"][size]
        for label, key, unit, limit in (("list p99", "list_p99", " ms", 20),
                                        ("get p99", "get_p99", " ms", None),
                                        ("peak RSS", "rss", " MB", 150)):
            worst = max(s[key], p[key])
            summary.append(("apiscale", f"{size} machines: {label} (SQLite | PostgreSQL)",
                            f"{fmt(s[key], unit)} | {fmt(p[key], unit)}", "",
                            fmt(p[key] / s[key], "x") + " PG/SQLite",
                            f"< {limit}{unit} (api bench)" if limit else "",
                            verdict(worst < limit) if limit else ""))
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,50000")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    summary = run(tuple(int(x) for x in args.sizes.split(",")), args.quick)
    table("API scale summary", SUMMARY_HEADER, summary)


if __name__ == "__main__":
    main()
