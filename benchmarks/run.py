"""Run the benchmarks and print their tables: python benchmarks/run.py [name ...]."""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import api  # noqa: E402

BENCHMARKS = {"api": api.run}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", default=list(BENCHMARKS), choices=list(BENCHMARKS))
    args = parser.parse_args()
    for name in args.names:
        BENCHMARKS[name]()


if __name__ == "__main__":
    main()
