"""Ports for the servers the tests start, free of each other's.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the
ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999), the same
range every outgoing connection takes its source port from, and the test
process releases it before the server it is for binds it: meanwhile another
pytest-xdist worker may be handed the same port, or a connection may take it.
So each worker picks from a range of its own below the ephemeral range
(worker ``gwN``: 10000 + N * 5000 up to 5,000 ports), in turn, and checks
that the port is free.
"""

import itertools
import os
import random
import socket

BASE, SPAN = 10000, 5000


def _worker_index():
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


_START = BASE + (_worker_index() % 4) * SPAN
_NEXT = itertools.count(random.randrange(SPAN))


def free_port():
    """A port no other worker of this run picks, free on 127.0.0.1 and ::1 now."""
    for _ in range(SPAN):
        port = _START + next(_NEXT) % SPAN
        try:
            for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
                with socket.socket(family) as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port in {_START}-{_START + SPAN - 1}")
