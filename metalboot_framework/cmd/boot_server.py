"""metalboot-boot-server: serve boot artifacts and boot reports to booting
machines (see :mod:`metalboot_framework.boot_server`)."""

import sys

from metalboot_framework.boot_server.process import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
