"""metalboot: move bare-metal fleets between boot interfaces, with proof of every boot."""

__version__ = "0.1.0"

from metalboot_framework.hooks import hookimpl  # noqa: E402,F401  (for hook plugins)
