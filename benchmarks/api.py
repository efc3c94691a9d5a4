"""API benchmark: register 10,000 machines in one request, then page through them.

Prints registration time, GET /v1/machines?limit=100 p50/p99 over the whole
collection, and the server's peak RSS, for metalboot and, side by side, for
the bare WSGI baseline (benchmarks/baseline_server.py).
Targets (2 cores): registration < 5 s, list p99 < 20 ms, RSS < 150 MB.
"""

import argparse
import json
import subprocess
import sys
import time

import requests

from benchmarks.common import (MetalbootServer, fmt, free_port, peak_rss_mb, percentile,
                               table, wait_http)


def machine(n):
    return {"id": f"00000000-0000-4000-8000-{n:012x}", "partition": "bench",
            "nics": [{"mac": "52:54:%02x:%02x:%02x:%02x" % (
                (n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255)}],
            "bmc": {"address": f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}",
                    "username": "root", "password": "secret"}}


def measure(url, session, count, passes, settle=None):
    """``settle``: called after the registration (metalboot: until enrolled), so
    that the listing is measured at rest; returns its seconds too."""
    body = json.dumps([machine(i) for i in range(count)])
    t0 = time.perf_counter()
    r = session.post(url + "/v1/machines", data=body,
                     headers={"Content-Type": "application/json"}, timeout=300)
    register = time.perf_counter() - t0
    assert r.status_code == 201, r.text[:300]
    if settle is not None:
        t0 = time.perf_counter()
        settle()
        print(f"{count} machines enrolled {time.perf_counter() - t0:.2f} s after the "
              f"registration answered")
    latencies = []
    for _ in range(passes):
        marker = None
        while True:
            q = "/v1/machines?limit=100" + (f"&marker={marker}" if marker else "")
            t0 = time.perf_counter()
            r = session.get(url + q, timeout=30)
            latencies.append((time.perf_counter() - t0) * 1000)
            marker = r.json()["next_marker"]
            if marker is None:
                break
    return register, latencies


def run(count=10000, passes=3):
    results = []
    server = MetalbootServer()
    try:
        server.session.post(server.url + "/v1/partitions", json={"id": "bench"}).raise_for_status()
        reg, lat = measure(server.url, server.session, count, passes, server.wait_enrolled)
        results.append(("metalboot", reg, lat, peak_rss_mb(server.proc.pid)))
    finally:
        server.stop()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.baseline_server", str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/v1/machines", proc)
        reg, lat = measure(url, requests.Session(), count, passes)
        results.append(("bare WSGI baseline", reg, lat, peak_rss_mb(proc.pid)))
    finally:
        proc.terminate()
        proc.wait()
    rows = [(name, fmt(reg, " s"), fmt(percentile(lat, 50), " ms"), fmt(percentile(lat, 99), " ms"),
             fmt(rss, " MB")) for name, reg, lat, rss in results]
    m, b = results
    rows.append(("ratio metalboot/baseline", fmt(m[1] / b[1], "x"),
                 fmt(percentile(m[2], 50) / percentile(b[2], 50), "x"),
                 fmt(percentile(m[2], 99) / percentile(b[2], 99), "x"), fmt(m[3] / b[3], "x")))
    table(f"API: register {count} machines in one request, then GET ?limit=100 over all "
          f"({passes} passes, {len(m[2])} requests)",
          ["server", "register", "list p50", "list p99", "peak RSS"], rows)
    targets = {"register < 5 s": m[1] < 5, "list p99 < 20 ms": percentile(m[2], 99) < 20,
               "RSS < 150 MB": m[3] < 150}
    print("targets: " + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in targets.items()))
    return targets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, default=10000)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    run(args.machines, args.passes)


if __name__ == "__main__":
    main()
