"""Run the benchmarks and print their tables: python benchmarks/run.py [--quick] [name ...].

``scale`` runs redfish, bootstorm, conductors and apiscale one after the other
and prints one combined table at the end; ``--quick`` scales everything down to
a smoke check (a minute or so) whose figures mean nothing.
"""

import argparse
import datetime
import os
import signal
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import agent, api, apiscale, bootstorm, conductors, dhcp, migration, redfish  # noqa: E402,E501
from benchmarks.common import SUMMARY_HEADER, loadavg, table  # noqa: E402

SCALE = {"redfish": redfish.run, "bootstorm": bootstorm.run, "conductors": conductors.run,
         "apiscale": apiscale.run}


def run_api(quick=False):
    return api.run(1000, 1) if quick else api.run()


def machine():
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    with open("/proc/meminfo") as f:
        kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return (f"{os.cpu_count()} CPUs ({models[0] if models else 'unknown'}), "
            f"{kib / 1024 / 1024:.1f} GiB RAM, Python {sys.version.split()[0]}, "
            f"{datetime.date.today().isoformat()}")


def run_scale(quick=False, names=None):
    rows, failed = [], []
    start_load = loadavg()
    for name in names or SCALE:
        try:
            rows += SCALE[name](quick=quick)
        except Exception as exc:  # the others still run; the table says what failed
            traceback.print_exc()
            failed.append(name)
            rows.append((name, "FAILED", f"{type(exc).__name__}: {exc}"[:80], "", "", "",
                         "FAILED"))
    table(f"Scale benchmarks{' (--quick: smoke check, figures mean nothing)' if quick else ''}"
          f": {machine()}; load average {start_load:.2f} at start, {loadavg():.2f} at end",
          SUMMARY_HEADER, rows)
    if failed:
        raise SystemExit(f"benchmarks failed: {', '.join(failed)}")
    return rows


def run_migration(quick=False):
    """Conductor CPU per machine, and wall time with 200 ms BMC calls."""
    if quick:
        migration.run(count=200, max_parallel=50)
    else:
        migration.run(count=10000, max_parallel=500)


BENCHMARKS = {"api": run_api, "migration": run_migration, "redfish": redfish.run,
              "agent": agent.run, "dhcp": dhcp.run,
              "bootstorm": bootstorm.run, "conductors": conductors.run, "apiscale": apiscale.run,
              "scale": run_scale}
#: What `python benchmarks/run.py` (tox -e bench) runs without names.
DEFAULT = ["api", "scale"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    # no choices=: argparse rejects an empty list against them (Python 3.11)
    parser.add_argument("names", nargs="*", metavar="name",
                        help=f"one of {', '.join(BENCHMARKS)} (default: {' '.join(DEFAULT)})")
    parser.add_argument("--quick", action="store_true",
                        help="scale everything down: a smoke check, not a measurement")
    parser.add_argument("--skip", action="append", default=[], choices=list(SCALE),
                        help="leave this part of scale out (e.g. where wrk or PostgreSQL "
                             "is missing); repeatable")
    args = parser.parse_args()
    # SIGTERM (timeout, CI) unwinds like Ctrl-C: every finally stops what it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from "
                     f"{', '.join(BENCHMARKS)}")
    for name in args.names or DEFAULT:
        if name == "scale":
            run_scale(args.quick, [n for n in SCALE if n not in args.skip])
        elif name in SCALE or name == "agent":  # these return summary rows
            rows = BENCHMARKS[name](quick=args.quick)
            table(f"{name} summary", SUMMARY_HEADER, rows)
        else:
            BENCHMARKS[name](quick=args.quick)


if __name__ == "__main__":
    main()
