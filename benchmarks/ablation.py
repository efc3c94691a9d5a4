"""What a mechanism added for speed buys: alternating runs with and without it.

Each file ``benchmarks/ablations/<mechanism>.diff`` takes one mechanism out of
the code in the smallest way that keeps the behaviour (group commit: one
transaction per write; the successor chosen in advance: none chosen; and so
on; ``doc/architecture.rst`` says what each one is). This script copies the
checkout twice, applies the diff to one copy, and runs a benchmark on both
copies in turn, ``--pairs`` times, the order swapped every pair so that a
drift of the host's speed favours neither. It prints each run's figure and
the gain of the mechanism: the median over the pairs of (without / with) for
a wall time, (with / without) for a rate; 1.10 means the mechanism makes the
figure 10% better.

    python -m benchmarks.ablation group-commit --pairs 3
    python -m benchmarks.ablation revision-checks --benchmark bootstorm

A mechanism stays in the code only if it buys at least 10% on the migration
benchmark with blocking steps or on the boot storm (see doc/benchmarks.rst).
"""

import argparse
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ABLATIONS = ROOT / "benchmarks" / "ablations"

# benchmark -> (its command after ``python -m``, default arguments, what is read
# from its output, whether a higher figure is better)
BENCHMARKS = {
    "migration": (["benchmarks.migration", "--only", "latency"],
                  ["--steps", "blocking"],
                  re.compile(r"^metalboot\s+([\d.]+) s", re.M), False),
    "bootstorm": (["benchmarks.bootstorm"], [],
                  re.compile(r"^bootstorm\s+scripts: req/s.*?([\d.]+)x", re.M), True),
}


def mechanisms():
    """The names of the mechanisms that have an ablation."""
    return sorted(p.stem for p in ABLATIONS.glob("*.diff"))


def copy_tree(dest):
    """The checkout's tracked files (as they are now, uncommitted edits too) in ``dest``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.split(b"\0")
    for name in filter(None, files):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def apply(diff, tree, check=False):
    """Apply ``diff`` to ``tree`` (``git apply`` works outside a repository too)."""
    command = ["git", "apply"] + (["--check"] if check else []) + [str(diff)]
    result = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"{diff.name} does not apply to this checkout: "
                         f"{result.stderr.strip()}")


def run_once(tree, benchmark, args):
    command, _, pattern, _ = BENCHMARKS[benchmark]
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{tree / 'plugins'}")
    out = subprocess.run([sys.executable, "-m", *command, *args], cwd=tree, env=env,
                         capture_output=True, text=True)
    found = pattern.search(out.stdout)
    if out.returncode or not found:
        sys.stdout.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise SystemExit(f"the {benchmark} benchmark failed in {tree}")
    steal = re.search(r"^host: ([\d.]+)% of the CPU time stolen", out.stdout, re.M)
    return float(found.group(1)), steal.group(1) + "% stolen" if steal else ""


def parse(argv):
    """(the options, the benchmark's arguments) of a command line."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mechanism", choices=mechanisms())
    parser.add_argument("--benchmark", choices=sorted(BENCHMARKS), default="migration")
    parser.add_argument("--pairs", type=int, default=3)
    parser.epilog = ("The benchmark's own arguments follow a --; the default for the "
                     "migration benchmark: --steps blocking.")
    # split here: argparse gives a positional "args" nothing once the
    # mechanism's name was read before the options
    ours, bench = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    args = parser.parse_args(ours)
    return args, bench or BENCHMARKS[args.benchmark][1]


def main(argv=None):
    args, bench_args = parse(sys.argv[1:] if argv is None else list(argv))
    higher_better = BENCHMARKS[args.benchmark][3]
    with tempfile.TemporaryDirectory(prefix="metalboot-ablation-") as work:
        trees = {"with": pathlib.Path(work, "with"), "without": pathlib.Path(work, "without")}
        for tree in trees.values():
            copy_tree(tree)
        apply(ABLATIONS / f"{args.mechanism}.diff", trees["without"])
        gains = []
        print(f"{args.mechanism}: {args.benchmark} {' '.join(bench_args)}, "
              f"{args.pairs} pairs", flush=True)
        for pair in range(args.pairs):
            order = ("with", "without") if pair % 2 == 0 else ("without", "with")
            figures = {}
            for name in order:
                figures[name], steal = run_once(trees[name], args.benchmark, bench_args)
                print(f"  pair {pair + 1}: {name:<8} {figures[name]:.2f} {steal}", flush=True)
            gain = (figures["with"] / figures["without"] if higher_better
                    else figures["without"] / figures["with"])
            gains.append(gain)
            print(f"  pair {pair + 1}: gain {gain:.3f}", flush=True)
    print(f"{args.mechanism}: gain per pair {', '.join(f'{g:.3f}' for g in gains)}; "
          f"median {statistics.median(gains):.3f}")


if __name__ == "__main__":
    main()
