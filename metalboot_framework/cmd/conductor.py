"""metalboot-conductor: runs migrations; shares the work with the other conductors
of the same database. Each needs its own ``[DEFAULT] host`` name."""

import sys

from metalboot_framework.cmd.server import run


def main(argv=None):
    return run("metalboot-conductor", "Run a metalboot conductor (no API).", argv,
               with_api=False, with_conductor=True)


if __name__ == "__main__":
    sys.exit(main())
