"""metalboot-boot-agent: serve a partition's boot data, replicated from the
API, to its booting machines (see :mod:`metalboot_framework.agent`)."""

import sys

from metalboot_framework.agent.process import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
