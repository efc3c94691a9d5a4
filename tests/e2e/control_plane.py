"""The control plane of the e2e boot network, split from the partition it serves.

With ``Harness(agent=True)`` the harness builds, beside the partition's
namespace (the boot network of :mod:`tests.e2e.harness`)::

    netns <partition>c  (the control plane)          netns <partition>  (the partition)
      lo                                                br0 fd55::1/64, machines, radvd, Kea,
      PostgreSQL  *:5432                                image server, TLS front, BMCs on
      metalboot-api        [fd56::1]:6480               [fd56::2]:81NN
      metalboot-conductor  -> PostgreSQL, the BMCs      metalboot-boot-agent [fd55::1]:8080
      ctl0 fd56::1/64  <------------- veth ----------->  up0 fd56::2/64

In the control namespace ip6tables drops everything that comes in from the
partition's link except NDP, TCP to the API's port and what belongs to
connections the control plane opened (the conductor's to the BMCs): the
partition reaches the control plane only at the API, as a fenced boot VRF
does. Machines have no route to fd56::/64 at all (the control namespace has no
route back to fd55::/64).

The agent has a token made through the API and no database; the partition's
``boot_url`` is the agent's address, so every URL a machine is given points at
it. The agent also drives the partition's dnsmasq and Kea (their files, Kea's
control socket): the conductor publishes DHCP entries and waits until the
agent applied them; its configuration names no DHCP server's file.
"""

import os
import signal
import sys

import sqlalchemy

from tests.e2e.harness import Proc, sh, wait_until
from tests.pgserver import PostgresServer

CONTROL_V6, UPLINK_V6 = "fd56::1", "fd56::2"  # the veth link: control plane, partition
CONTROL_IF, UPLINK_IF = "ctl0", "up0"
API_PORT = 6480
API_URL = f"http://[{CONTROL_V6}]:{API_PORT}"
AGENT_ID = "e2e-agent"
#: The API process and the conductor process of the control plane.
API, CONDUCTOR = "metalboot-api", "metalboot-conductor"
#: Run in the control namespace: exits 0 once the API answers (401 without a token).
API_UP = ("import sys, urllib.request, urllib.error\n"
          "try:\n"
          f"    urllib.request.urlopen('{API_URL}/v1', timeout=2)\n"
          "except urllib.error.HTTPError as exc:\n"
          "    sys.exit(exc.code != 401)\n"
          "except OSError:\n"
          "    sys.exit(1)\n")


class ControlPlane:
    """PostgreSQL, the API and a conductor in a namespace of their own, joined to
    the partition's namespace by a veth link the partition may use only for the API."""

    def __init__(self, harness):
        self.h = harness
        self.netns = harness.netns + "c"
        self.netns_made = False
        self.postgres = None
        self.database = None  # URL of metalboot's database for the test process
        self.api = self.conductor = None
        self.conf = None  # the configuration file of the API and the conductor
        self.api_paused = False

    # -- network ------------------------------------------------------------------------
    def in_ns(self, *cmd, check=True):
        return sh("ip", "netns", "exec", self.netns, *cmd, check=check)

    def build_network(self):
        sh("ip", "netns", "add", self.netns)
        self.netns_made = True
        self.in_ns("ip", "link", "set", "lo", "up")
        self.h.in_ns("ip", "link", "add", UPLINK_IF, "type", "veth", "peer", "name", CONTROL_IF,
                     "netns", self.netns)
        self.h.in_ns("ip", "addr", "add", f"{UPLINK_V6}/64", "dev", UPLINK_IF, "nodad")
        self.h.in_ns("ip", "link", "set", UPLINK_IF, "up")
        self.in_ns("ip", "addr", "add", f"{CONTROL_V6}/64", "dev", CONTROL_IF, "nodad")
        self.in_ns("ip", "link", "set", CONTROL_IF, "up")
        self.firewall()

    def firewall(self):
        """From the partition's link: NDP, TCP to the API's port, and answers to
        connections the control plane opened; everything else dropped."""
        rules = [
            ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
            ["-p", "ipv6-icmp", "--icmpv6-type", "neighbour-solicitation", "-j", "ACCEPT"],
            ["-p", "ipv6-icmp", "--icmpv6-type", "neighbour-advertisement", "-j", "ACCEPT"],
            ["-p", "tcp", "--dport", str(API_PORT), "-m", "conntrack", "--ctstate", "NEW",
             "-j", "ACCEPT"],
            ["-j", "DROP"]]
        for rule in rules:
            self.in_ns("ip6tables", "-A", "INPUT", "-i", CONTROL_IF, *rule)
        self.in_ns("ip6tables", "-A", "FORWARD", "-i", CONTROL_IF, "-j", "DROP")
        self.in_ns("iptables", "-A", "INPUT", "-i", CONTROL_IF, "-j", "DROP")

    def pause_api(self):
        """SIGSTOP the API process: its port still accepts connections (the
        kernel's backlog), nothing answers them, as with a hung API."""
        os.kill(self.api.pid, signal.SIGSTOP)
        self.api_paused = True

    def resume_api(self):
        if self.api_paused:
            os.kill(self.api.pid, signal.SIGCONT)
            self.api_paused = False

    def rules(self):
        return self.in_ns("ip6tables", "-S").stdout

    def connect_from_partition(self, host, port, timeout=3):
        """None if a TCP connection from the partition's namespace to
        ``[host]:port`` is accepted, else why it was not."""
        return self._connect(self.h.in_ns, host, port, timeout)

    def connect_from_control(self, host, port, timeout=3):
        """As :meth:`connect_from_partition`, from the control plane's namespace."""
        return self._connect(self.in_ns, host, port, timeout)

    @staticmethod
    def _connect(in_ns, host, port, timeout):
        code = ("import socket, sys\n"
                "try:\n"
                f"    socket.create_connection(({host!r}, {port}), timeout={timeout}).close()\n"
                "except OSError as exc:\n"
                "    print(repr(exc)); sys.exit(1)\n")
        out = in_ns(sys.executable, "-c", code, check=False)
        return None if out.returncode == 0 else (out.stdout.strip() or out.stderr.strip())

    # -- processes ----------------------------------------------------------------------
    def start(self, conf_text, env):
        """PostgreSQL, then the API (which upgrades the schema), then the conductor."""
        self.postgres = PostgresServer(netns=self.netns, listen="*").start()
        self.database = self.postgres.create_database()
        name = sqlalchemy.engine.make_url(self.database).database
        conf = self.conf = os.path.join(self.h.workdir, "control-plane.conf")
        with open(conf, "w") as f:
            f.write(conf_text + f"\n[database]\nconnection = postgresql+psycopg://postgres@"
                                f"127.0.0.1:{self.postgres.port}/{name}\n")
        self.commands = {
            API: [sys.executable, "-m", "metalboot_framework.cmd.api", "--config-file", conf],
            CONDUCTOR: [sys.executable, "-m", "metalboot_framework.cmd.conductor",
                        "--config-file", conf]}
        self.env = env
        self.api = self._spawn(API)
        wait_until(lambda: self.in_ns(sys.executable, "-c", API_UP,
                                      check=False).returncode == 0, API, self.api)
        self.conductor = self._spawn(CONDUCTOR)

    def _spawn(self, name):
        proc = Proc(name, ["ip", "netns", "exec", self.netns, *self.commands[name]],
                           os.path.join(self.h.workdir, f"{name}.log"), env=self.env,
                           cwd=self.h.workdir)
        self.h.procs.append(proc)
        return proc

    def evidence_rows(self):
        """Every boot_evidence row (with ``delivery``: the agent id and journal
        sequence of a delivered row), read from PostgreSQL's unix socket."""
        engine = sqlalchemy.create_engine(self.database)
        try:
            with engine.connect() as conn:
                rows = conn.exec_driver_sql(
                    "SELECT id, machine_id, interface, kind, path, client_address, created_at, "
                    "data, delivery FROM boot_evidence ORDER BY id").mappings().all()
        finally:
            engine.dispose()
        return [dict(row) for row in rows]

    def close(self, errors):
        """After the harness stopped the processes: PostgreSQL, then the namespace."""
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None
        if self.netns_made:
            left = sh("ip", "netns", "pids", self.netns, check=False).stdout.split()
            for pid in left:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            out = sh("ip", "netns", "del", self.netns, check=False)
            if out.returncode:
                errors.append(f"ip netns del {self.netns}: {out.stderr.strip()}")
            self.netns_made = False

