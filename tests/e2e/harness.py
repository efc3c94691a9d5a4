"""The e2e harness: real UEFI firmware booting a real kernel through metalboot's boot interfaces.

One :class:`Harness` builds, in a network namespace of its own (unique name,
removed on close even when a step failed)::

    netns mbe2e<id>
      br0  fd55::1/64 (+ 10.55.0.1/24 unless ipv6_only; a veth end keeps its carrier up)
       |- tap0 .. tapN-1  <- qemu-system-x86_64 -accel tcg, OVMF, virtio-net romfile=
       |                     (one per machine, started and reset by its BMC below)
      radvd        SLAAC prefix fd55::/64, RDNSS fd55::1
      dnsmasq      (not with ipv6_only) DHCPv4 + TFTP (trixie snponly.efi), the
                   operator snippet of doc/boot-interfaces/dhcp.rst; the agent
                   writes --dhcp-hostsdir/optsdir
      kea-dhcp6    the operator snippet of doc/boot-interfaces/dhcp.rst (a pool
                   for the firmware's address); the agent writes the included
                   reservations, reloads over the control socket and reads the
                   memfile lease file
      image server [fd55::1]:8081, the partition's kernel_url/initrd_url: the
                   test metal-hammer (metal_hammer.py), every request logged
      metalboot-server  [fd55::1]:8080 (API, artifacts, conductor), public_url
                   http://[fd55::1]:8080; its configuration names no DHCP file
      metalboot-boot-agent  [fd55::1]:8082, of the partition (a token made through
                   the API): applies the DHCP entries the pxe and dhcp-httpboot
                   steps publish to dnsmasq and Kea; the steps wait for it
      qemu_bmc.py  one Redfish BMC per machine on 127.0.0.1:81NN *of the namespace*:
                   sushy-emulator (fake driver) linked to the machine's QEMU process

``agent=True`` splits the control plane from the partition
(:mod:`tests.e2e.control_plane`): PostgreSQL, metalboot-api and
metalboot-conductor run in a namespace of their own, which the partition
reaches only at the API's port, and metalboot-boot-agent serves the machines
on [fd55::1]:8080 in place of metalboot-server, and drives dnsmasq and Kea;
``agents=2``: two agents on one anycast address behind an ECMP route
(:mod:`tests.e2e.anycast`), the first of them driving dnsmasq and Kea.

``[artifacts] boot_network_prefixes`` is configured only if a test asks for
it (``boot_network_prefixes``): the DHCP paths bind the machines' fetches by
token, SLAAC addresses by their EUI-64, DHCP leases by the agent's lease files.

``ipv6_only=True`` is the boot network of the layer-3 paths: no DHCPv4 server,
no IPv4 address on the bridge, NICs registered without ``ipv4_address``, ``pxe``
not enabled. Without it the network is dual-stack, for the legacy ``pxe`` path.

The test process reaches the server and the BMCs through ``netns_forward.py``
(127.0.0.1 of the host to addresses inside the namespace); no link joins the
namespace to the host, so all boot traffic stays inside it.

Every process is started by the harness (``ip netns exec``) and stopped by its
pid in :meth:`Harness.close`; QEMU processes are stopped by their BMC and, as a
backup, by the pid in their pid file.

What is real and what is not:

* real: OVMF (Debian 12) with its own PXE/HTTP boot stack, trixie's iPXE,
  dnsmasq, Kea, radvd, metalboot-server and its plugins and DHCP backends,
  metalboot's own ``boot.ipxe``, a Debian kernel with a busybox initramfs that
  posts the boot report, Redfish over HTTP with sushy on metalboot's side.
* the BMC is a harness (``qemu_bmc.py``): power changes are immediate, and
  ``HttpBootUri`` becomes a URI boot entry in NVRAM, the firmware-side
  equivalent of what a BMC does.
* OVMF sends its HTTP-boot DHCPv6 Solicit only after another network boot
  attempt in the same boot, so for ``UefiHttp`` the BMC orders PXEv6 (IPv6
  only; Kea gives an address, no boot file: ~15 s) or HTTPv4 (dual-stack;
  dnsmasq's offer fails fast) before the HTTPv6 entry.
"""

import contextlib
import datetime
import io
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid

import bcrypt
import requests

from tests.e2e import metal_hammer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PLUGIN_DIR = os.path.join(HERE, "plugin")
FETCH_IPXE = os.path.join(HERE, "fetch_trixie_ipxe.sh")

OVMF_CODE = os.environ.get("METALBOOT_E2E_OVMF_CODE", "/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = os.environ.get("METALBOOT_E2E_OVMF_VARS", "/usr/share/OVMF/OVMF_VARS_4M.fd")

V4_NET, V4_SERVER = "10.55.0", "10.55.0.1"
V6_PREFIX, V6_SERVER = "fd55::", "fd55::1"
KEA_POOL = "fd55::1000/116"  # fd55::1000-fd55::1fff: the firmware's DHCPv6 addresses
SERVER_PORT = 8080
IMAGE_PORT = 8081  # the partition's image server: metal-hammer's kernel and initrd
IMAGE_URL = f"http://[{V6_SERVER}]:{IMAGE_PORT}"
AGENT_PORT = 8082  # beside metalboot-server: the agent that drives dnsmasq and Kea
DHCP_AGENT_ID = "e2e-dhcp-agent"
#: The boot interfaces whose DHCP entries the partition's agents apply.
DHCP_INTERFACES = ("pxe", "dhcp-httpboot")
TLS_PORT = 8443  # a TLS front of metalboot-server: the firmware's HTTPS boot URL
TLS_URL = f"https://[{V6_SERVER}]:{TLS_PORT}"
CA_OWNER = "e2e00000-0000-4000-8000-00000000ca01"  # owner GUID of the CA in the ESL
BMC_PORT_BASE = 8100
PUBLIC_URL = f"http://[{V6_SERVER}]:{SERVER_PORT}"
ADMIN_TOKEN = "e2e-admin-token"
BMC_USER, BMC_PASSWORD = "admin", "e2e-bmc-password"
PARTITION = "e2e"

BOOT_INTERFACES = ["fake", "pxe", "redfish-virtual-media-ipxe", "redfish-http-url", "dhcp-httpboot",
                   "e2e-http-url-404"]
#: On an IPv6-only boot network (no DHCPv4, no IPv4 address): the layer-3 paths.
IPV6_ONLY_INTERFACES = [i for i in BOOT_INTERFACES if i != "pxe"]

REQUIRED_TOOLS = {
    "ip": "iproute2", "qemu-system-x86_64": "qemu-system-x86", "radvd": "radvd",
    "dnsmasq": "dnsmasq-base", "kea-dhcp6": "kea-dhcp6-server",
    "virt-fw-vars": "pip install virt-firmware",
    "virt-fw-sigdb": "pip install virt-firmware", "mkfs.vfat": "dosfstools", "mcopy": "mtools",
    "apt-get": "apt", "dpkg-deb": "dpkg",
}


class HarnessError(RuntimeError):
    pass


def missing_requirements():
    """What this machine lacks for the e2e tests (empty list: all there)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces, tap devices)")
    for tool, package in REQUIRED_TOOLS.items():
        if not shutil.which(tool):
            missing.append(f"{tool} ({package})")
    for path in (OVMF_CODE, OVMF_VARS):
        if not os.path.exists(path):
            missing.append(f"{path} (ovmf)")
    try:
        import sushy_tools  # noqa: F401
    except ImportError:
        missing.append("sushy-tools (pip)")
    return missing


def trixie_ipxe_dir():
    """Directory with Debian trixie's ipxe.efi and snponly.efi (fetched once, cached)."""
    env = os.environ.get("METALBOOT_E2E_IPXE_DIR")
    if env:
        return env
    with metal_hammer.cache_lock("ipxe-trixie"):
        out = subprocess.run(["bash", FETCH_IPXE, metal_hammer.cache_dir()],
                             capture_output=True, text=True)
    if out.returncode:
        raise HarnessError(f"{FETCH_IPXE} failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


def sh(*cmd, check=True):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if check and out.returncode:
        raise HarnessError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    return out


def utc_epoch(iso_or_naive):
    """Seconds since the epoch of a UTC time as metalboot stores or shows it."""
    if isinstance(iso_or_naive, str):
        text = iso_or_naive.rstrip("Z").replace("T", " ")
        value = datetime.datetime.fromisoformat(text)
    else:
        value = iso_or_naive
    return value.replace(tzinfo=datetime.timezone.utc).timestamp()


def wait_until(ready, what, proc, timeout=60):
    """Until ``ready()``; HarnessError with ``proc``'s log if it exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        if not proc.alive():
            raise HarnessError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log()}")
        if time.monotonic() > deadline:
            raise HarnessError(f"{what} not ready after {timeout} s:\n{proc.log()}")
        time.sleep(0.2)


class Proc:
    """A process started by the harness (in the namespace), stopped by its pid."""

    def __init__(self, name, cmd, log_path, env=None, cwd=None):
        self.name, self.cmd, self.log_path = name, cmd, log_path
        log = open(log_path, "ab")
        self.popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        log.close()

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def log(self, tail=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-tail:])
        except FileNotFoundError:
            return ""

    def stop(self, timeout=10):
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)


class Machine:
    """One QEMU machine, its BMC, and its record in metalboot."""

    def __init__(self, harness, index):
        self.index = index
        self.name = f"m{index + 1}"
        self.id = str(uuid.UUID(int=(0xE2E0 << 112) | (harness.run_number << 16) | index + 1))
        self.mac = f"52:54:00:e2:e0:{index + 1:02x}"
        self.tap = f"tap{index}"
        self.ipv4_address = f"{V4_NET}.{11 + index}"
        self.ipv6_only = harness.ipv6_only
        self.cacerts = harness.cacerts  # the test CA as an EFI signature list, for fw_cfg
        self.workdir = os.path.join(harness.workdir, self.name)
        self.bmc_port = BMC_PORT_BASE + index
        # with a control plane of its own, the conductor reaches the BMCs over the link
        self.bmc_host = harness.bmc_host
        self.bmc_local_url = None  # through the forwarder, for the test process (debugging)
        os.makedirs(self.workdir, exist_ok=True)

    @property
    def bmc_address(self):  # as metalboot's conductor reaches it
        host = f"[{self.bmc_host}]" if ":" in self.bmc_host else self.bmc_host
        return f"http://{host}:{self.bmc_port}"

    @property
    def slaac_address(self):
        """The SLAAC (EUI-64) address iPXE and the kernel take from radvd's prefix."""
        octets = [int(b, 16) for b in self.mac.split(":")]
        eui = [octets[0] ^ 2] + octets[1:3] + [0xFF, 0xFE] + octets[3:]
        return str(ipaddress.IPv6Address(ipaddress.IPv6Address(V6_PREFIX).packed[:8]
                                         + bytes(eui)))

    def spec(self):
        return {"mac": self.mac, "tap": self.tap, "workdir": self.workdir,
                "ovmf_code": OVMF_CODE, "ovmf_vars": OVMF_VARS, "memory": 768,
                "ipv6_only": self.ipv6_only, "cacerts": self.cacerts}

    def boots(self):
        """The BMC's record of each QEMU start (time, override, NVRAM edits)."""
        try:
            with open(os.path.join(self.workdir, "boots.jsonl")) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def serial(self):
        try:
            with open(os.path.join(self.workdir, "serial.log"), "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return re.sub(r"\x1b\[[0-9;=?]*[A-Za-z]", "", text).replace("\r", "")

    def qemu_pid(self):
        try:
            with open(os.path.join(self.workdir, "qemu.pid")) as f:
                return int(f.read().strip())
        except (FileNotFoundError, ValueError):
            return None


class Harness:
    """The boot network, its servers, metalboot-server and N machines with BMCs."""

    def __init__(self, machines=2, workdir=None, ipxe_dir=None, log=None, keep_workdir=None,
                 ipv6_only=False, trusted_ca=True, agent=False, agents=1,
                 boot_network_prefixes=()):
        self.count = machines
        self.ipv6_only = ipv6_only
        self.interfaces = IPV6_ONLY_INTERFACES if ipv6_only else BOOT_INTERFACES
        # HTTPS boot for redfish-http-url on the IPv6-only network
        self.https = ipv6_only
        self.trusted_ca = trusted_ca  # False: OVMF gets a CA that did not sign the server's
        self.cacerts = None
        self.run_number = int.from_bytes(os.urandom(2), "big")
        self.netns = f"mbe2e{os.getpid() % 100000}x{self.run_number:04x}"
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="metalboot-e2e-")
        os.makedirs(self.workdir, exist_ok=True)
        self.keep_workdir = keep_workdir if keep_workdir is not None else not self._own_workdir
        self.ipxe_dir = ipxe_dir
        self.log = log or (lambda msg: print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}",
                                             file=sys.stderr, flush=True))
        self.procs = []
        self.netns_made = False
        if self.https:
            self.tls_dir = os.path.join(self.workdir, "tls")
            self.cacerts = os.path.join(self.tls_dir, "cacerts.esl")
        self.control = self.anycast = None
        self.bmc_host = "127.0.0.1"
        self.boot_host = V6_SERVER  # where the machines fetch from metalboot
        if agent or agents > 1:
            from tests.e2e.control_plane import UPLINK_V6, ControlPlane
            self.control = ControlPlane(self)
            self.bmc_host = UPLINK_V6
        if agents > 1:
            from tests.e2e.anycast import ANYCAST_V6, AnycastAgents
            self.anycast = AnycastAgents(self)
            self.boot_host = ANYCAST_V6
        self.boot_network_prefixes = list(boot_network_prefixes)
        # where the configuration of metalboot-server, the API and the conductor
        # puts the DHCP servers' files: nowhere (only the agents write them)
        self.no_dhcp_dir = os.path.join(self.workdir, "no-dhcp-files-outside-the-agents")
        self.agent_specs = {}  # agent id -> how to start it, its URL, its process
        self.dhcp_agent_ids = []  # the agents that drive the DHCP servers
        self.agent_urls = {}  # agent id -> its base URL for the test, through a forwarder
        self.agent_url = None  # the (first) agent's
        self.machines = [Machine(self, i) for i in range(machines)]
        self.server_url = None
        self.server = None
        self.server_conf = None  # metalboot-server's, or the API's and the conductor's
        self.state_dir = os.path.join(self.workdir, "metalboot-state")
        self._partition_made = False

    # -- life cycle -------------------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        missing = missing_requirements()
        if missing:
            raise HarnessError("missing for the e2e tests: " + ", ".join(missing))
        t0 = time.monotonic()
        self.ipxe_dir = self.ipxe_dir or trixie_ipxe_dir()
        for binary in ("ipxe.efi", "snponly.efi"):
            if not os.path.isfile(os.path.join(self.ipxe_dir, binary)):
                raise HarnessError(f"{self.ipxe_dir} has no {binary}")
        self.metal_hammer_dir = metal_hammer.build()
        self._network()
        if self.control:
            self.control.build_network()
        if self.anycast:
            self.anycast.build()
        self._radvd()
        if not self.ipv6_only:
            self._dnsmasq()
        self._kea()
        self._image_server()
        if self.https:
            self._tls_front()
        if self.control:
            self._control_plane()
        else:
            self._metalboot_server()
        self._bmcs()
        self._forwarder()
        self._wait_ready()
        self._agents()
        self.log(f"boot network {self.netns} with {self.count} machine(s) ready in "
                 f"{time.monotonic() - t0:.1f} s (workdir {self.workdir})")

    def close(self):
        """Stop everything this harness started, by pid, and delete its namespace."""
        errors = []
        for machine in self.machines:
            pid = machine.qemu_pid()
            # QEMU first: the BMCs stop their own QEMU on SIGTERM, this is the backup.
            if pid and self._is_ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.control:
            self.control.resume_api()  # a stopped process does not see SIGTERM
        for proc in reversed(self.procs):
            try:
                proc.stop()
            except Exception as exc:  # keep cleaning up
                errors.append(f"{proc.name}: {exc}")
        self.procs = []
        if self.anycast:
            self.anycast.close(errors)
        if self.control:
            self.control.close(errors)
        if self.netns_made:
            # Anything still running in our namespace was started by us (a child a
            # daemon forked): stop it by pid before the namespace goes.
            left = sh("ip", "netns", "pids", self.netns, check=False).stdout.split()
            for pid in left:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            if left:
                self.log(f"killed {len(left)} leftover process(es) in {self.netns}: "
                         f"{' '.join(left)}")
            out = sh("ip", "netns", "del", self.netns, check=False)
            if out.returncode:
                errors.append(f"ip netns del {self.netns}: {out.stderr.strip()}")
            self.netns_made = False
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if errors:
            self.log("clean-up problems: " + "; ".join(errors))

    def _is_ours(self, pid):
        """Whether ``pid`` is a QEMU of this harness (its command line names our workdir)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return self.workdir.encode() in f.read()
        except OSError:
            return False

    def _spawn(self, name, cmd, env=None, cwd=None):
        proc = Proc(name, ["ip", "netns", "exec", self.netns, *cmd],
                    os.path.join(self.workdir, f"{name}.log"), env=env, cwd=cwd)
        self.procs.append(proc)
        return proc

    def in_ns(self, *cmd, check=True):
        return sh("ip", "netns", "exec", self.netns, *cmd, check=check)

    # -- the boot network ---------------------------------------------------------------
    def _network(self):
        sh("ip", "netns", "add", self.netns)
        self.netns_made = True
        ns = self.in_ns
        ns("ip", "link", "set", "lo", "up")
        ns("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1",
           "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
        ns("ip", "link", "add", "br0", "type", "bridge", "forward_delay", "0", "stp_state", "0")
        for machine in self.machines:
            ns("ip", "tuntap", "add", machine.tap, "mode", "tap")
            ns("ip", "link", "set", machine.tap, "master", "br0")
            ns("ip", "link", "set", machine.tap, "up")
        # A veth end on the bridge keeps br0's carrier up before any VM runs (Kea binds).
        ns("ip", "link", "add", "vd0", "type", "veth", "peer", "name", "vd1")
        ns("ip", "link", "set", "vd0", "master", "br0")
        ns("ip", "link", "set", "vd0", "up")
        ns("ip", "link", "set", "vd1", "up")
        ns("ip", "link", "set", "br0", "up")
        if not self.ipv6_only:
            ns("ip", "addr", "add", f"{V4_SERVER}/24", "dev", "br0")
        ns("ip", "addr", "add", f"{V6_SERVER}/64", "dev", "br0", "nodad")
        deadline = time.monotonic() + 10
        while "fe80" not in ns("ip", "-6", "addr", "show", "dev", "br0").stdout:
            if time.monotonic() > deadline:
                raise HarnessError("br0 got no IPv6 link-local address")
            time.sleep(0.05)

    def _radvd(self):
        conf = os.path.join(self.workdir, "radvd.conf")
        with open(conf, "w") as f:
            f.write(RADVD_CONF.format(prefix=V6_PREFIX, dns=V6_SERVER))
        self._spawn("radvd", ["radvd", "--nodaemon", "-C", conf, "-p",
                              os.path.join(self.workdir, "radvd.pid"), "-m", "stderr"])

    def _dnsmasq(self):
        root = os.path.join(self.workdir, "dnsmasq")
        self.dnsmasq_dirs = {d: os.path.join(root, d) for d in ("hosts", "opts", "tftp")}
        for d in self.dnsmasq_dirs.values():
            os.makedirs(d, exist_ok=True)
        shutil.copyfile(os.path.join(self.ipxe_dir, "snponly.efi"),
                        os.path.join(self.dnsmasq_dirs["tftp"], "snponly.efi"))
        conf = os.path.join(root, "dnsmasq.conf")
        with open(conf, "w") as f:
            f.write(DNSMASQ_CONF.format(root=root, net=V4_NET))
        self.dnsmasq_pid_file = os.path.join(root, "dnsmasq.pid")
        self.dnsmasq = self._spawn("dnsmasq", ["dnsmasq", "--keep-in-foreground",
                                               "--log-facility=-", f"--conf-file={conf}"])

    def _kea(self):
        root = os.path.join(self.workdir, "kea")
        os.makedirs(os.path.join(root, "run"), exist_ok=True)
        self.kea_include = os.path.join(root, "metalboot-reservations6.json")
        open(self.kea_include, "w").close()
        self.kea_socket = os.path.join(root, "run", "kea6.sock")
        self.kea_leases = os.path.join(root, "kea-leases6.csv")
        conf = os.path.join(root, "kea-dhcp6.conf")
        with open(conf, "w") as f:
            f.write(KEA_CONF % {"root": root, "include": self.kea_include,
                                "socket": self.kea_socket, "prefix": V6_PREFIX,
                                "pool": KEA_POOL, "leases": self.kea_leases})
        env = dict(os.environ, KEA_PIDFILE_DIR=os.path.join(root, "run"),
                   KEA_LOCKFILE_DIR=os.path.join(root, "run"))
        self.kea = self._spawn("kea", ["kea-dhcp6", "-c", conf], env=env)

    def _image_server(self):
        self.image_log = os.path.join(self.workdir, "image-server.jsonl")
        self._spawn("image-server", [sys.executable, os.path.join(HERE, "image_server.py"),
                                     self.metal_hammer_dir, V6_SERVER, str(IMAGE_PORT),
                                     self.image_log])

    def _tls_front(self):
        """A CA of this run, a server certificate for fd55::1 signed by it, the
        CA as an EFI signature list for OVMF's fw_cfg ``etc/edk2/https/cacerts``,
        and the TLS front with it."""
        make_test_ca(self.tls_dir, V6_SERVER)
        enrolled = self.tls_dir
        if not self.trusted_ca:
            enrolled = os.path.join(self.tls_dir, "other")
            make_test_ca(enrolled, V6_SERVER)
        sh("virt-fw-sigdb", "--add-cert", CA_OWNER, os.path.join(enrolled, "ca.pem"),
           "-o", self.cacerts)
        self.tls_log = os.path.join(self.workdir, "tls-front.jsonl")
        self._spawn("tls-front", [sys.executable, os.path.join(HERE, "tls_front.py"),
                                  os.path.join(self.tls_dir, "server.pem"),
                                  os.path.join(self.tls_dir, "server.key"), V6_SERVER,
                                  str(TLS_PORT), self.boot_host, str(SERVER_PORT), self.tls_log])

    def tls_connections(self, since=None):
        """Connections the TLS front accepted: time, client, TLS version (or error)."""
        try:
            with open(self.tls_log) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except (AttributeError, FileNotFoundError):
            return []
        return [c for c in lines if since is None or c["time"] >= since]

    def _metalboot_server(self):
        conf = self.server_conf = os.path.join(self.workdir, "metalboot.conf")
        with open(conf, "w") as f:
            f.write(self._metalboot_conf(V6_SERVER, SERVER_PORT, PUBLIC_URL))
        self.server = self._spawn("metalboot-server", [
            sys.executable, "-m", "metalboot_framework.cmd.server", "--config-file", conf],
            env=self._metalboot_env(), cwd=self.workdir)

    def _control_plane(self):
        from tests.e2e.control_plane import API_PORT, API_URL, CONTROL_V6
        self.control.start(self._metalboot_conf(CONTROL_V6, API_PORT, API_URL),
                           self._metalboot_env())
        self.server = self.control.api
        self.server_conf = self.control.conf

    def _agents(self):
        """The partition and its boot agents. With the control plane apart the
        machines boot from the agents' address; with metalboot-server one agent
        beside it (its own port) only drives the DHCP servers."""
        if not self.control:
            self._make_partition()
            listen = f"[{V6_SERVER}]:{AGENT_PORT}"
            self.start_agent(DHCP_AGENT_ID, self.netns, listen, PUBLIC_URL)
            self.wait_dhcp_agents()
            return
        from tests.e2e.control_plane import AGENT_ID, API_URL
        listen = f"[{self.boot_host}]:{SERVER_PORT}"
        self._make_partition(boot_url=f"http://{listen}")
        where = {AGENT_ID: self.netns}
        if self.anycast:
            where = {f"{AGENT_ID}-{key}": netns for key, netns in self.anycast.netns.items()}
        for n, (agent_id, netns) in enumerate(where.items()):
            # one dnsmasq and one Kea in the partition: the first agent drives them
            self.start_agent(agent_id, netns, listen, API_URL, dhcp_servers=n == 0)
        self.agent_url = next(iter(self.agent_urls.values()))
        self.wait_dhcp_agents()

    def start_agent(self, agent_id, netns, listen, api_url, dhcp_servers=True):
        """metalboot-boot-agent of the partition in ``netns`` on ``listen``, with
        a token made through the API; ``dhcp_servers``: it applies the DHCP
        entries to the harness's dnsmasq and Kea (else it serves no DHCP
        interface). Returns when its /healthz says it is fresh."""
        port, = self._forward(netns, [listen], f"{agent_id}-forwarder")
        if dhcp_servers:
            self.dhcp_agent_ids.append(agent_id)
        self.agent_urls[agent_id] = f"http://127.0.0.1:{port}"
        token = self.api("POST", f"/v1/partitions/{PARTITION}/agent-tokens", expect=201,
                         json={"description": f"e2e partition agent {agent_id}"})["token"]
        directory = os.path.join(self.workdir, agent_id)
        os.makedirs(directory, exist_ok=True)
        token_file = os.path.join(directory, "token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        os.chmod(token_file, 0o600)
        text = self._metalboot_conf(V6_SERVER, SERVER_PORT, PUBLIC_URL, dhcp_servers=True)
        if not dhcp_servers:
            text = text.replace(f"enabled_boot_interfaces = {','.join(self.interfaces)}",
                                "enabled_boot_interfaces = " + ",".join(
                                    i for i in self.interfaces if i not in DHCP_INTERFACES))
        conf = os.path.join(directory, "agent.conf")
        with open(conf, "w") as f:
            f.write(text.replace(f"state_path = {self.state_dir}",
                                 f"state_path = {directory}/state-path")
                    + f"\n[agent]\napi_url = {api_url}\ntoken_file = {token_file}\n"
                      f"partitions = {PARTITION}\nlisten = {listen}\n"
                      f"state_dir = {directory}/state\nagent_id = {agent_id}\n")
        self.agent_specs[agent_id] = {
            "cmd": ["ip", "netns", "exec", netns,
                    os.path.join(os.path.dirname(sys.executable), "metalboot-boot-agent"),
                    "--config-file", conf],
            "cwd": directory, "url": self.agent_urls[agent_id]}
        return self.restart_agent(agent_id)

    def restart_agent(self, agent_id):
        """(Re)start an agent on its state directory; returns when it is fresh."""
        spec = self.agent_specs[agent_id]
        proc = Proc(agent_id, spec["cmd"], os.path.join(self.workdir, f"{agent_id}.log"),
                    env=self._metalboot_env(), cwd=spec["cwd"])
        self.procs.append(proc)
        spec["proc"] = proc

        def fresh():
            try:
                return requests.get(spec["url"] + "/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False
        wait_until(fresh, agent_id, proc)
        return proc

    def kill_agent(self, agent_id):
        """SIGKILL, as a crash: nothing flushed, its journal left as it is on disk."""
        proc = self.agent_specs[agent_id]["proc"]
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(10)

    def dhcp_agents(self):
        """GET /v1/partitions/{id}/dhcp-agents: what the agents applied."""
        return self.api("GET", f"/v1/partitions/{PARTITION}/dhcp-agents")

    def wait_dhcp_agents(self, timeout=30):
        """Until the agents that drive DHCP servers are listed fresh (the
        prepare steps of pxe and dhcp-httpboot wait for them)."""
        ids = self.dhcp_agent_ids

        def listed():
            fresh = {a["agent"] for a in self.dhcp_agents()["agents"] if a["fresh"]}
            return set(ids) <= fresh
        wait_until(listed, "DHCP agents " + ", ".join(ids),
                   self.agent_specs[ids[0]]["proc"], timeout)

    def dhcp_files(self):
        """{path: text} of what the DHCP servers read of metalboot: dnsmasq's
        hosts and opts files, Kea's included reservations."""
        paths = [self.kea_include]
        if not self.ipv6_only:
            paths += [os.path.join(d, name) for key, d in self.dnsmasq_dirs.items()
                      if key != "tftp" for name in sorted(os.listdir(d))]
        found = {}
        for path in paths:
            with open(path) as f:
                found[path] = f.read()
        return found

    def _metalboot_env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [PLUGIN_DIR] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        return env

    def _metalboot_conf(self, host, port, public_url, dhcp_servers=False):
        """metalboot's configuration: of metalboot-server, or of the API and conductor
        (plus [database]), or of the agent (plus [agent]). Only an agent's
        (``dhcp_servers``) names the DHCP servers' files; the others name paths
        in :attr:`no_dhcp_dir`, which does not exist."""
        os.makedirs(self.state_dir, exist_ok=True)
        ipxe_efi = os.path.join(self.ipxe_dir, "ipxe.efi")
        kea = (self.kea_include, self.kea_socket, self.kea_leases)
        if not dhcp_servers:
            kea = [os.path.join(self.no_dhcp_dir, os.path.basename(p)) for p in kea]
        with io.StringIO() as f:
            f.write(METALBOOT_CONF.format(
                state=self.state_dir, interfaces=",".join(self.interfaces), server=host,
                port=port, public_url=public_url, token=ADMIN_TOKEN,
                ipxe_efi=ipxe_efi, dns6=V6_SERVER,
                kea_include=kea[0], kea_socket=kea[1], kea_leases=kea[2],
                artifacts=METALBOOT_ARTIFACTS_CONF.format(
                    prefixes=",".join(self.boot_network_prefixes))
                if self.boot_network_prefixes else ""))
            if not self.ipv6_only:
                root = os.path.dirname(self.dnsmasq_pid_file)
                if not dhcp_servers:
                    root = self.no_dhcp_dir
                f.write(METALBOOT_IPV4_CONF.format(
                    dns4=V4_SERVER, hosts=os.path.join(root, "hosts"),
                    opts=os.path.join(root, "opts"),
                    dnsmasq_pid=os.path.join(root, "dnsmasq.pid"),
                    dnsmasq_leases=os.path.join(root, "leases")))
            else:
                f.write("ipv4_backend =\n")  # still [dhcp_httpboot]: no DHCPv4 answers
            if self.https:
                f.write(f"\n[redfish]\nhttp_boot_base_url = {TLS_URL}\n")
            return f.getvalue()

    def _bmcs(self):
        for machine in self.machines:
            conf = os.path.join(machine.workdir, "bmc.conf")
            state = os.path.join(machine.workdir, "bmc-state")
            os.makedirs(state, exist_ok=True)
            system = {"uuid": machine.id, "name": machine.name, "power_state": "Off",
                      "boot_mode": "UEFI", "external_notifier": False,
                      "nics": [{"mac": machine.mac, "ip": machine.ipv4_address}]}
            htpasswd = os.path.join(machine.workdir, "htpasswd")
            with open(htpasswd, "w") as f:
                f.write(f"{BMC_USER}:"
                        f"{bcrypt.hashpw(BMC_PASSWORD.encode(), bcrypt.gensalt(4)).decode()}\n")
            with open(conf, "w") as f:
                f.write(f"SUSHY_EMULATOR_LISTEN_IP = {machine.bmc_host!r}\n"
                        f"SUSHY_EMULATOR_LISTEN_PORT = {machine.bmc_port}\n"
                        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
                        f"SUSHY_EMULATOR_STATE_DIR = {state!r}\n"
                        f"SUSHY_EMULATOR_AUTH_FILE = {htpasswd!r}\n"
                        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {[system]!r}\n"
                        f"E2E_MACHINES = {{{machine.id!r}: {machine.spec()!r}}}\n")
            self._spawn(f"bmc-{machine.name}", [sys.executable, os.path.join(HERE, "qemu_bmc.py"),
                                                "--config", conf], cwd=machine.workdir)

    def _forwarder(self):
        netns, server = self.netns, f"[{V6_SERVER}]:{SERVER_PORT}"
        if self.control:  # the API, and the BMCs over the link (control -> partition)
            from tests.e2e.control_plane import API_PORT, CONTROL_V6
            netns, server = self.control.netns, f"[{CONTROL_V6}]:{API_PORT}"
        ports = self._forward(netns, [server] + [m.bmc_address.split("//")[1]
                                                 for m in self.machines], "forwarder")
        self.server_url = f"http://127.0.0.1:{ports[0]}"
        for machine, port in zip(self.machines, ports[1:], strict=True):
            machine.bmc_local_url = f"http://127.0.0.1:{port}"

    def _forward(self, netns, targets, name):
        """Ports on 127.0.0.1 forwarded to ``targets`` in ``netns``."""
        proc = Proc(name, [sys.executable, os.path.join(HERE, "netns_forward.py"),
                           netns, *targets],
                    os.path.join(self.workdir, f"{name}.log"))
        self.procs.append(proc)
        deadline = time.monotonic() + 10
        ports = None
        while time.monotonic() < deadline and proc.alive():
            text = proc.log()
            if text.strip():
                ports = [int(p) for p in text.split()]
                break
            time.sleep(0.02)
        if not ports:
            raise HarnessError(f"netns_forward.py did not start:\n{proc.log()}")
        return ports

    def _wait_ready(self, timeout=60):
        def http(url):
            return lambda: requests.get(url, timeout=2).status_code in (200, 401)

        def kea():
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(2)
                sock.connect(self.kea_socket)
                sock.sendall(b'{"command": "status-get"}')
                return b'"result": 0' in sock.recv(65536)

        waiting = {"metalboot-server": http(self.server_url + "/v1"), "kea-dhcp6": kea,
                   "image-server": lambda: "serving" in self._proc("image-server").log()}
        if not self.ipv6_only:
            waiting["dnsmasq"] = lambda: os.path.exists(self.dnsmasq_pid_file)
        if self.https:
            waiting["tls-front"] = lambda: "TLS front" in self._proc("tls-front").log()
        waiting.update({f"bmc-{m.name}": http(m.bmc_local_url + "/redfish/v1/")
                        for m in self.machines})
        deadline = time.monotonic() + timeout
        while waiting:
            for proc in self.procs:
                if not proc.alive():
                    raise HarnessError(f"{proc.name} exited ({proc.popen.returncode}):\n"
                                       f"{proc.log()}")
            for name, ready in list(waiting.items()):
                try:
                    if ready():
                        del waiting[name]
                except (OSError, requests.RequestException):
                    pass
            if waiting and time.monotonic() > deadline:
                raise HarnessError(f"not ready after {timeout} s: {', '.join(waiting)}")
            time.sleep(0.1)

    def ipv4_on_the_boot_network(self):
        """What of IPv4 the machines' side offers: IPv4 addresses on the bridge
        and sockets bound to the DHCPv4 server port (67) in the namespace."""
        addresses = self.in_ns("ip", "-4", "-o", "addr", "show", "dev", "br0").stdout.split()
        listeners = self.in_ns("ss", "-H", "-uln", "sport = :67").stdout.strip()
        return [a for a in addresses if "." in a and "/" in a] + (
            [f"udp/67: {listeners}"] if listeners else [])

    def _proc(self, name):
        return next(p for p in self.procs if p.name == name)

    # -- metalboot over REST ------------------------------------------------------------
    def api(self, method, path, expect=None, **kw):
        kw.setdefault("timeout", 60)
        r = requests.request(method, self.server_url + path,
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, **kw)
        if (expect is not None and r.status_code != expect) or r.status_code >= 400:
            raise HarnessError(f"{method} {path}: HTTP {r.status_code}"
                               + (f" (expected {expect})" if expect else "") + f": {r.text}")
        return r.json() if r.content else None

    def register(self, boot_interface, machines=None):
        """The partition (once) and the machines, on ``boot_interface``."""
        machines = machines or self.machines
        if not self._partition_made:
            self._make_partition()
        body = [{"id": m.id, "partition": PARTITION, "boot_interface": boot_interface,
                 "boot_mode": "uefi",
                 "nics": [{"mac": m.mac} if self.ipv6_only
                          else {"mac": m.mac, "ipv4_address": m.ipv4_address}],
                 "bmc": {"address": m.bmc_address, "username": BMC_USER,
                         "password": BMC_PASSWORD, "verify_tls": False},
                 "properties": {"redfish_system_id": m.id}} for m in machines]
        return self.api("POST", "/v1/machines", expect=201, json=body)

    def _make_partition(self, boot_url=None):
        boot = {
            # no_timer_check: on a busy TCG host the kernel's IO-APIC
            # timer check can fail and panic ("IO-APIC + timer doesn't work")
            "cmdline": "console=ttyS0 quiet no_timer_check",
            "kernel_url": f"{IMAGE_URL}/vmlinuz",
            "initrd_url": f"{IMAGE_URL}/initrd.img"}
        if boot_url:
            boot["boot_url"] = boot_url
        self.api("POST", "/v1/partitions", expect=201, json={"id": PARTITION, "boot": boot})
        self._partition_made = True

    def wait_enrolled(self, machines=None, timeout=60):
        """Until metalboot has prepared the machines' boot interface; their records."""
        machines = machines or self.machines
        deadline = time.monotonic() + timeout
        while True:
            records = {m.id: self.machine(m) for m in machines}
            if not any(r["state"] == "enrolling" for r in records.values()):
                return records
            if time.monotonic() > deadline:
                raise HarnessError(f"machines still enrolling after {timeout} s: {records}")
            time.sleep(0.2)

    def power_on(self, machine):
        """What an operator does to a machine that is off: Redfish Reset On at its BMC
        (no boot override: the firmware's own boot order, CD-ROM then PXEv4)."""
        r = requests.post(f"{machine.bmc_local_url}/redfish/v1/Systems/{machine.id}/Actions/"
                          f"ComputerSystem.Reset", json={"ResetType": "On"},
                          auth=(BMC_USER, BMC_PASSWORD), timeout=30)
        if r.status_code >= 400:
            raise HarnessError(f"{machine.name}: BMC refused Reset On: {r.status_code} "
                               f"{r.text[:200]}")

    def migrate(self, target, machines=None, boot_timeout=180, **options):
        machines = machines or self.machines
        body = {"selector": {"machines": [m.id for m in machines]}, "boot_interface": target,
                "max_parallel": len(machines), "boot_timeout": boot_timeout, **options}
        return self.api("POST", "/v1/migrations", expect=202, json=body)

    def wait_migration(self, migration_id, timeout=600):
        deadline = time.monotonic() + timeout
        while True:
            m = self.api("GET", f"/v1/migrations/{migration_id}")
            if m["state"] in ("done", "halted", "cancelled") and m["finished_at"]:
                return m
            if time.monotonic() > deadline:
                raise HarnessError(f"migration {migration_id} still {m['state']} after "
                                   f"{timeout} s: {m['counts']}")
            time.sleep(0.5)

    def migration_machines(self, migration_id):
        page = self.api("GET", f"/v1/migrations/{migration_id}/machines",
                        params={"limit": 1000})
        return {row["machine_id"]: row for row in page["machines"]}

    def machine(self, machine):
        return self.api("GET", f"/v1/machines/{machine.id}")

    def events(self, machine):
        return self.api("GET", f"/v1/machines/{machine.id}/events",
                        params={"limit": 1000})["events"]

    # -- observations ------------------------------------------------------------------
    def evidence(self, machine=None, since=None):
        """Boot evidence rows the server recorded (read-only look at its database;
        with the agent, PostgreSQL's, and ``delivery`` the agent's id:sequence)."""
        if self.control:
            return self._select_evidence(self.control.evidence_rows(), machine, since)
        db = os.path.join(self.state_dir, "metalboot.sqlite")
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            rows = con.execute("SELECT id, machine_id, interface, kind, path, client_address, "
                               "created_at, data FROM boot_evidence ORDER BY id").fetchall()
        finally:
            con.close()
        return self._select_evidence(
            [dict(zip(("id", "machine_id", "interface", "kind", "path", "client_address",
                       "created_at", "data"), row, strict=True)) for row in rows], machine, since)

    @staticmethod
    def _select_evidence(rows, machine, since):
        out = []
        for item in rows:
            item["time"] = utc_epoch(item["created_at"])
            if isinstance(item["data"], str):
                item["data"] = json.loads(item["data"])
            item["data"] = item["data"] or {}
            if machine is not None and item["machine_id"] != machine.id:
                continue
            if since is not None and item["time"] < since:
                continue
            out.append(item)
        return out

    def image_fetches(self, clients=None, since=None):
        """Requests to the image server (kernel, initrd): time, client, path,
        status; ``clients``: only from these addresses."""
        try:
            with open(self.image_log) as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        return [line for line in lines
                if (clients is None or line["client"] in clients)
                and (since is None or line["time"] >= since)]

    def evidence_time(self, evidence_id):
        for item in self.evidence():
            if item["id"] == evidence_id:
                return item["time"]
        raise HarnessError(f"no boot evidence {evidence_id}")

    def wait_evidence(self, machine, interface, since, timeout=180):
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.evidence(machine, since) if e["interface"] == interface]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise HarnessError(f"{machine.name}: no fetch through {interface} within "
                                   f"{timeout} s\n--- serial console (tail) ---\n"
                                   + "\n".join(machine.serial().splitlines()[-40:]))
            time.sleep(0.2)


def make_test_ca(directory, address):
    """ca.pem, server.pem, server.key in ``directory``: a CA made for this run and
    a certificate for ``address`` (an IP SAN, as the firmware checks) signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "metalboot e2e test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    with open(os.path.join(directory, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(pem))
    with open(os.path.join(directory, "server.pem"), "wb") as f:
        f.write(cert.public_bytes(pem))
    with open(os.path.join(directory, "server.key"), "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))


RADVD_CONF = """\
interface br0 {{
  AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 4;
  AdvManagedFlag off; AdvOtherConfigFlag off;
  prefix {prefix}/64 {{ AdvOnLink on; AdvAutonomous on; }};
  RDNSS {dns} {{ }};
}};
"""

# The operator's dnsmasq.conf for metalboot (doc/boot-interfaces/dhcp.rst), plus
# what a test needs (own lease/pid files, no DNS, log to stderr, no ping delay).
DNSMASQ_CONF = """\
interface=br0
bind-interfaces
user=root
port=0
dhcp-range={net}.100,{net}.200,255.255.255.0,1h
dhcp-authoritative
no-ping
dhcp-leasefile={root}/leases
pid-file={root}/dnsmasq.pid
log-dhcp
enable-tftp
tftp-root={root}/tftp
dhcp-hostsdir={root}/hosts
dhcp-optsdir={root}/opts
dhcp-userclass=set:ipxe,iPXE
dhcp-match=set:ipxe,175
dhcp-match=set:bios,option:client-arch,0
dhcp-match=set:efi64,option:client-arch,7
dhcp-match=set:efi64,option:client-arch,9
dhcp-match=set:efiarm64,option:client-arch,11
dhcp-vendorclass=set:efihttp,HTTPClient
dhcp-option-force=tag:efihttp,tag:metalboot-dhcp-httpboot,60,HTTPClient
"""

# The operator's kea-dhcp6.conf for metalboot (doc/boot-interfaces/dhcp.rst).
KEA_CONF = """\
{"Dhcp6": {
  "interfaces-config": {"interfaces": ["br0"]},
  "control-socket": {"socket-type": "unix", "socket-name": "%(socket)s"},
  "data-directory": "%(root)s",
  "lease-database": {"type": "memfile", "persist": true, "name": "%(leases)s",
                     "lfc-interval": 0},
  "loggers": [{"name": "kea-dhcp6", "severity": "INFO",
               "output_options": [{"output": "%(root)s/kea.log"}]}],
  "subnet6": [{"id": 1, "subnet": "%(prefix)s/64", "interface": "br0",
    "pools": [{"pool": "%(pool)s"}],
    "reservations": [
<?include "%(include)s"?>
    ]}]
}}
"""

METALBOOT_CONF = """\
[DEFAULT]
state_path = {state}
enabled_boot_interfaces = {interfaces}
default_boot_interface = fake

[api]
host_ip = {server}
port = {port}
public_url = {public_url}
admin_tokens = {token}

{artifacts}
[conductor]
poll_interval = 0.2
drift_check_interval = 0

[bmc]
connect_timeout = 5
read_timeout = 60
retry_attempts = 3
retry_interval = 0.5
retry_max_interval = 2
power_poll_interval = 0.2
power_timeout = 30

[redfish]
ipxe_efi_path = {ipxe_efi}

[dhcp]
ipv6_dns_servers = {dns6}

[kea]
include_file = {kea_include}
control_socket = {kea_socket}
lease_file = {kea_leases}

[pxe]
dhcp_backend = dnsmasq
efi_x64_boot_file = snponly.efi

[dhcp_httpboot]
ipv6_backend = kea
ipxe_efi_path = {ipxe_efi}
"""

# Only for a boot path that needs it (Harness(boot_network_prefixes=...)):
# addresses bound to no machine but by the prefix.
METALBOOT_ARTIFACTS_CONF = """\
[artifacts]
boot_network_prefixes = {prefixes}
"""

# Only on a network with IPv4 (the legacy pxe path): dnsmasq's DHCPv4.
METALBOOT_IPV4_CONF = """\
ipv4_backend = dnsmasq

[dhcp]
ipv4_dns_servers = {dns4}

[dnsmasq]
hostsdir = {hosts}
optsdir = {opts}
pid_file = {dnsmasq_pid}
lease_file = {dnsmasq_leases}
"""
