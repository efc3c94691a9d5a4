"""Two boot agents of the partition behind one anycast address, for the e2e tests.

With ``Harness(agent=True, agents=2)`` each agent runs in a namespace of its
own with the anycast address on its loopback, and the partition's namespace
(the boot network's router) has an ECMP route to both, hashed by L4 ports::

    netns <partition>  br0 fd55::1/64 (machines; radvd makes it their default router)
      aga fd58:1::1/64 --- veth --- pt0 fd58:1::2/64  netns <partition>a  lo fd57::1/128
      agb fd58:2::1/64 --- veth --- pt0 fd58:2::2/64  netns <partition>b  lo fd57::1/128
      fd57::1/128 nexthop via fd58:1::2 dev aga nexthop via fd58:2::2 dev agb

The agents reach the API through the partition's namespace (the control
namespace routes fd58::/16 back over its link, still only to the API's port).
:meth:`AnycastAgents.announce` replaces the route as a BGP speaker does when
an agent's health check fails: the machines' next connections go to the agents
still announced.
"""

import contextlib
import os
import signal

from tests.e2e.control_plane import UPLINK_V6
from tests.e2e.harness import sh

ANYCAST_V6 = "fd57::1"
#: agent key -> (the partition's end of its link, the agent's end)
LINKS = {"a": ("fd58:1::1", "fd58:1::2"), "b": ("fd58:2::1", "fd58:2::2")}


class AnycastAgents:
    """The agents' namespaces, links and the ECMP route; removed by :meth:`close`."""

    def __init__(self, harness):
        self.h = harness
        self.netns = {key: harness.netns + key for key in LINKS}
        self.made = []

    def in_ns(self, key, *cmd):
        return sh("ip", "netns", "exec", self.netns[key], *cmd)

    def build(self):
        for key, (router, agent) in LINKS.items():
            sh("ip", "netns", "add", self.netns[key])
            self.made.append(self.netns[key])
            self.in_ns(key, "ip", "link", "set", "lo", "up")
            self.in_ns(key, "ip", "addr", "add", f"{ANYCAST_V6}/128", "dev", "lo")
            self.h.in_ns("ip", "link", "add", f"ag{key}", "type", "veth", "peer", "name", "pt0",
                         "netns", self.netns[key])
            self.h.in_ns("ip", "addr", "add", f"{router}/64", "dev", f"ag{key}", "nodad")
            self.h.in_ns("ip", "link", "set", f"ag{key}", "up")
            self.in_ns(key, "ip", "addr", "add", f"{agent}/64", "dev", "pt0", "nodad")
            self.in_ns(key, "ip", "link", "set", "pt0", "up")
            self.in_ns(key, "ip", "-6", "route", "add", "default", "via", router)
        self.h.in_ns("sysctl", "-qw", "net.ipv6.fib_multipath_hash_policy=1")
        self.announce(*LINKS)
        self.h.control.in_ns("ip", "-6", "route", "add", "fd58::/16", "via", UPLINK_V6)

    def announce(self, *keys):
        """The anycast route through the agents ``keys`` only."""
        hops = []
        for key in keys:
            hops += ["nexthop", "via", LINKS[key][1], "dev", f"ag{key}"]
        self.h.in_ns("ip", "-6", "route", "replace", f"{ANYCAST_V6}/128", *hops)

    def route(self):
        return self.h.in_ns("ip", "-6", "route", "show", f"{ANYCAST_V6}/128").stdout

    def close(self, errors):
        for netns in self.made:
            for pid in sh("ip", "netns", "pids", netns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            out = sh("ip", "netns", "del", netns, check=False)
            if out.returncode:
                errors.append(f"ip netns del {netns}: {out.stderr.strip()}")
        self.made = []
