"""``metalboot demo``: a whole migration on this machine, in one command.

It starts, as child processes on 127.0.0.1 with a fresh temporary state
directory:

- a sushy-tools Redfish emulator (fake driver) with N systems: the BMC side;
- a metalboot-server with the boot interfaces fake, fake-alt and, when this
  machine can build the iPXE ISO, redfish-virtual-media-ipxe.

It registers one machine per emulated system and migrates them. With the
Redfish path (the default when possible) the migration is
``fake -> redfish-virtual-media-ipxe``: metalboot talks Redfish to the
emulator (inserts the partition's iPXE ISO as virtual CD, sets the one-time
boot override to Cd, resets the system), and -- since the emulator cannot
boot anything -- a simulated machine in this process plays the firmware: when
the emulator reports the system back on with the ISO inserted and the
override set, it downloads the ISO from the URL the BMC holds, reads its
``autoexec.ipxe`` and fetches the ``chain`` URL with its own MAC, as iPXE
would. That fetch is the boot evidence. Without the Redfish prerequisites the
migration is ``fake -> fake-alt`` with ``fake_autoboot`` (the server fetches
the boot URL itself), and the demo says so.

Everything started is stopped on exit, Ctrl-C or SIGTERM.
"""

import configparser
import ctypes
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import click
import requests

from metalboot_framework.cli.client import EXIT_FAILED, CliError, Client
from metalboot_framework.cli.migrations import Display, _watch, migration_machines

REDFISH = "redfish-virtual-media-ipxe"
DEFAULT_IPXE_EFI = "/usr/lib/ipxe/ipxe.efi"
PARTITION = "demo"
BMC_USER, BMC_PASSWORD = "admin", "demo-password"


class Terminated(Exception):
    """SIGTERM arrived: leave like Ctrl-C, through the clean-up."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child, before exec: get SIGTERM when the demo dies, even by SIGKILL."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Children:
    """The processes the demo started; stopped in reverse order, for sure."""

    def __init__(self):
        self.procs = []  # (name, Popen, log file)

    def start(self, name, argv, log_path, env=None):
        log = open(log_path, "ab")
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True,  # Ctrl-C reaches only the demo
                                    preexec_fn=_die_with_parent if sys.platform == "linux"
                                    else None)
        except BaseException:
            log.close()
            raise
        self.procs.append((name, proc, log))
        return proc

    def stop_all(self, timeout=10):
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                try:
                    proc.terminate()
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for _, proc, log in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()
        self.procs = []


def redfish_prerequisites(ipxe_efi):
    """None when the Redfish path can run here, else why not."""
    import importlib.util
    if importlib.util.find_spec("metalboot_redfish") is None:
        return "the metalboot_redfish plugin is not installed"
    try:
        with open(ipxe_efi, "rb") as f:
            if f.read(2) != b"MZ":
                return f"{ipxe_efi} is not an EFI binary"
    except OSError as exc:
        return f"no iPXE EFI binary at {ipxe_efi} ({exc.strerror}; Debian: apt-get install ipxe)"
    missing = [t for t in ("mkfs.vfat", "mmd", "mcopy") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found (Debian: apt-get install dosfstools mtools)"
    if importlib.util.find_spec("pycdlib") is None:
        return "pycdlib is not installed"
    return None


def _wait_http(url, proc, what, log_path, timeout=45):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CliError(f"{what} exited with {proc.returncode}; see {log_path}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise CliError(f"{what} did not answer {url} within {timeout} s; see {log_path}")


# -- the BMC side: a sushy-tools emulator ------------------------------------------------

def emulated_systems(count):
    systems = []
    for i in range(1, count + 1):
        systems.append({
            "uuid": f"4c4c4544-0000-1000-8000-{i:012x}", "name": f"demo-{i:02d}",
            "power_state": "On", "boot_mode": "UEFI", "external_notifier": False,
            "nics": [{"mac": f"52:54:00:de:{i >> 8:02x}:{i & 0xff:02x}", "ip": "127.0.0.1"}]})
    return systems


def start_emulator(children, workdir, systems):
    os.makedirs(os.path.join(workdir, "state"), exist_ok=True)
    for attempt in range(3):
        port = free_port()
        config = os.path.join(workdir, "emulator.conf")
        with open(config, "w") as f:
            f.write(f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
                    f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
                    f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
                    f"SUSHY_EMULATOR_STATE_DIR = {os.path.join(workdir, 'state')!r}\n"
                    f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n")
        log_path = os.path.join(workdir, "emulator.log")
        proc = children.start("sushy-emulator", [sys.executable, "-m",
                                                 "sushy_tools.emulator.main", "--config",
                                                 config], log_path)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_http(url + "/redfish/v1/", proc, "the sushy-tools emulator", log_path)
            return url
        except CliError:
            if attempt == 2:
                raise
            proc.terminate()


# -- metalboot-server --------------------------------------------------------------------

def start_server(children, workdir, interfaces, ipxe_efi, port=None):
    state = os.path.join(workdir, "server")
    os.makedirs(state, exist_ok=True)
    for attempt in range(3):
        use_port = port or free_port()
        conf = configparser.ConfigParser(interpolation=None)
        conf["DEFAULT"] = {"state_path": state, "enabled_boot_interfaces": ",".join(interfaces),
                           "default_boot_interface": "fake"}
        conf["api"] = {"host_ip": "127.0.0.1", "port": str(use_port)}
        conf["conductor"] = {"poll_interval": "0.2"}
        conf["bmc"] = {"connect_timeout": "5", "read_timeout": "30", "retry_attempts": "3",
                       "retry_interval": "0.2", "retry_max_interval": "1",
                       "power_poll_interval": "0.25", "power_timeout": "60",
                       "post_retry_interval": "0.5", "post_retry_timeout": "10"}
        if REDFISH in interfaces:
            conf["redfish"] = {"ipxe_efi_path": ipxe_efi}
        # the simulated machines fetch boot.ipxe by MAC from this host
        conf["artifacts"] = {"boot_network_prefixes": "127.0.0.0/8,::1/128"}
        path = os.path.join(workdir, "metalboot.conf")
        with open(path, "w") as f:
            conf.write(f)
        log_path = os.path.join(workdir, "server.log")
        env = dict(os.environ)
        env.pop("METALBOOT_STATE_DIR", None)
        proc = children.start("metalboot-server", [
            sys.executable, "-m", "metalboot_framework.cmd.server", "--config-file", path],
            log_path, env=env)
        url = f"http://127.0.0.1:{use_port}"
        try:
            _wait_http(url + "/v1", proc, "metalboot-server", log_path)
        except CliError:
            if attempt == 2 or port:
                raise
            proc.terminate()
            continue
        token_file = os.path.join(state, "admin-token")
        deadline = time.monotonic() + 10
        while not os.path.exists(token_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(token_file) as f:
            return url, token_file, f.read().strip()


# -- the machine side: simulated firmware and iPXE ---------------------------------------

class SimulatedRedfishMachines:
    """Plays the machines behind the emulated BMCs.

    Follows the API's event feed; after metalboot reset a system (event
    ``redfish-virtual-media-ipxe.reset``), it reads what the BMC (emulator) holds
    for that system: power, boot override, the virtual CD's image. If the CD is
    inserted and the one-time override says Cd, the "firmware" boots it:
    downloads the ISO from the image URL, reads /autoexec.ipxe and does what
    iPXE would -- fetch the ``chain`` URL with each NIC's MAC until one answers.
    """

    CHAIN_RE = re.compile(r"\bchain\s+(\S+)")

    def __init__(self, api_url, token, emulator_url, systems_by_machine):
        self.api = Client(api_url, token, timeout=30)
        self.emulator_url = emulator_url
        self.systems = systems_by_machine
        self.log = {}  # machine id -> [lines]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="simulated-machines")
        self.cursor = 0

    def start(self):
        body = self.api.get("/v1/events", since=0, limit=1000)
        while body["events"]:
            self.cursor = body["next_cursor"]
            body = self.api.get("/v1/events", since=self.cursor, limit=1000)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self):
        while not self._stop.is_set():
            try:
                body = self.api.get("/v1/events", since=self.cursor, limit=1000)
            except CliError:
                self._stop.wait(0.2)
                continue
            for event in body["events"]:
                if event["kind"] == f"{REDFISH}.reset" and event.get("machine_id") in \
                        self.systems:
                    threading.Thread(target=self._boot, args=(event["machine_id"],),
                                     daemon=True).start()
            self.cursor = body["next_cursor"]
            if not body["events"]:
                self._stop.wait(0.2)

    def _note(self, machine_id, line):
        self.log.setdefault(machine_id, []).append(line)

    def _boot(self, machine_id):
        try:
            self._boot_once(machine_id)
        except Exception as exc:  # a simulated machine that fails just does not boot
            self._note(machine_id, f"simulated boot failed: {type(exc).__name__}: {exc}")

    def _boot_once(self, machine_id):
        system_path = f"{self.emulator_url}/redfish/v1/Systems/{self.systems[machine_id]}"
        deadline = time.monotonic() + 30
        while True:  # the emulator applies power changes a few seconds late
            system = requests.get(system_path, timeout=10).json()
            if system.get("PowerState") == "On" or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        boot = system.get("Boot") or {}
        cd = requests.get(f"{system_path}/VirtualMedia/Cd", timeout=10).json()
        self._note(machine_id, f"BMC: power {system.get('PowerState')}, boot override "
                               f"{boot.get('BootSourceOverrideTarget')} "
                               f"({boot.get('BootSourceOverrideMode')}), virtual CD "
                               f"{'inserted' if cd.get('Inserted') else 'empty'}")
        if system.get("PowerState") != "On" or boot.get("BootSourceOverrideTarget") != "Cd" \
                or not cd.get("Inserted") or not cd.get("Image"):
            self._note(machine_id, "firmware: nothing to boot from the virtual CD")
            return
        iso = requests.get(cd["Image"], timeout=60)
        iso.raise_for_status()
        script = _autoexec_from_iso(iso.content)
        match = self.CHAIN_RE.search(script)
        self._note(machine_id, f"firmware: booted {cd['Image'].rsplit('/', 1)[-1]} "
                               f"({len(iso.content) // 1024} KiB), iPXE runs autoexec.ipxe")
        if not match:
            self._note(machine_id, "iPXE: autoexec.ipxe has no chain command")
            return
        nics = requests.get(f"{system_path}/EthernetInterfaces", timeout=10).json()
        macs = []
        for member in nics.get("Members", []):
            nic = requests.get(self.emulator_url + member["@odata.id"], timeout=10).json()
            if nic.get("MACAddress"):
                macs.append(nic["MACAddress"].lower())
        for mac in macs:
            url = re.sub(r"\$\{net\$\{idx\}/mac\}|\$\{net\d+/mac\}", mac, match.group(1))
            status = requests.get(url, timeout=30).status_code
            self._note(machine_id, f"iPXE: chain {url} -> HTTP {status}")
            if status == 200:
                return


def _autoexec_from_iso(data):
    import pycdlib
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(data))
    try:
        out = io.BytesIO()
        try:
            iso.get_file_from_iso_fp(out, joliet_path="/autoexec.ipxe")
        except pycdlib.pycdlibexception.PyCdlibException:
            iso.get_file_from_iso_fp(out, iso_path="/AUTOEXEC.IPX;1")
        return out.getvalue().decode("utf-8", "replace")
    finally:
        iso.close()


# -- the command -------------------------------------------------------------------------

def _say(text=""):
    click.echo(text)


def _write_cli_config(workdir, url, token_file):
    path = os.path.join(workdir, "cli.ini")
    with open(path, "w") as f:
        f.write(f"[metalboot]\nurl = {url}\ntoken_file = {token_file}\n")
    return path


@click.command("demo")
@click.option("--machines", "count", type=click.IntRange(1, 200), default=5, show_default=True,
              help="How many emulated machines to migrate.")
@click.option("--exit", "exit_after", is_flag=True,
              help="Stop everything once the migration finished (for tests and CI).")
@click.option("--interface", type=click.Choice(("auto", "redfish", "fake")), default="auto",
              show_default=True,
              help="Migrate to redfish-virtual-media-ipxe against the emulator (redfish), "
                   "to fake-alt with simulated boots (fake), or redfish when possible (auto).")
@click.option("--ipxe-efi", default=DEFAULT_IPXE_EFI, show_default=True,
              type=click.Path(dir_okay=False), help="iPXE EFI binary for the boot ISO.")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Port of the API (default: a free one).")
@click.option("--state-dir", type=click.Path(file_okay=False),
              help="Keep state here instead of a temporary directory (kept after exit).")
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              help="Seconds the migration may take.")
def group(count, exit_after, interface, ipxe_efi, port, state_dir, timeout):
    """Run a local demo: a BMC emulator, a server, and a migration you can watch.

    Starts a sushy-tools Redfish emulator and a metalboot-server on 127.0.0.1,
    registers one machine per emulated system, migrates them with simulated
    boots while showing progress, then prints where to look and keeps running
    until Ctrl-C (with --exit it stops at once, and prints no URLs that would
    lead nowhere). Exit 0 when every machine migrated, 1 otherwise.
    """
    import importlib.util
    if sys.platform != "linux":
        raise CliError("the demo runs on Linux only")
    have_emulator = importlib.util.find_spec("sushy_tools") is not None
    why_not = redfish_prerequisites(ipxe_efi) if have_emulator else \
        "sushy-tools is not installed (pip install '.[demo]' in metalboot's source directory)"
    if interface == "redfish" and why_not:
        raise CliError(f"cannot run the Redfish demo: {why_not}")
    use_redfish = interface != "fake" and why_not is None
    if interface == "fake":
        why_not = "--interface fake was given"
    target = REDFISH if use_redfish else "fake-alt"

    workdir = os.path.abspath(state_dir) if state_dir else tempfile.mkdtemp(
        prefix="metalboot-demo-")
    os.makedirs(workdir, exist_ok=True)
    children = Children()
    simulated = None

    def _terminate(signum, frame):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up
        raise Terminated()

    # Explicit handlers: a demo started in the background inherits SIGINT ignored.
    previous = {sig: signal.signal(sig, _terminate)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    code = EXIT_FAILED
    return_code = None
    try:
        systems = emulated_systems(count)
        emulator_url = None
        if have_emulator:
            _say(f"[1/5] starting a Redfish BMC emulator (sushy-tools, fake driver, "
                 f"{count} systems)")
            emulator_url = start_emulator(children, os.path.join(workdir, "emulator"),
                                          systems)
            _say(f"      {emulator_url}/redfish/v1/Systems")
        else:
            _say(f"[1/5] no BMC emulator: {why_not}")
        interfaces = ["fake", "fake-alt"] + ([REDFISH] if use_redfish else [])
        _say(f"[2/5] starting metalboot-server (boot interfaces: {', '.join(interfaces)})")
        url, token_file, token = start_server(children, workdir, interfaces, ipxe_efi, port)
        _say(f"      {url}/v1   (state: {workdir})")
        client = Client(url, token, timeout=60)

        _say(f"[3/5] registering partition {PARTITION} and {count} machines on boot "
             f"interface fake")
        client.post("/v1/partitions", {
            "id": PARTITION, "description": "created by metalboot demo",
            "boot": {"kernel_url": f"{url}/images/metal-hammer/vmlinuz",
                     "initrd_url": f"{url}/images/metal-hammer/initrd.img",
                     "cmdline": "console=ttyS0", "metal_hammer_version": "demo"}})
        bodies, by_machine = [], {}
        for system in systems:
            body = {"id": system["uuid"], "partition": PARTITION,
                    "nics": [{"mac": n["mac"]} for n in system["nics"]],
                    "boot_interface": "fake", "boot_mode": "uefi",
                    "properties": {"demo_name": system["name"]}}
            if emulator_url:
                body["bmc"] = {"address": emulator_url, "username": BMC_USER,
                               "password": BMC_PASSWORD, "verify_tls": False}
                body["properties"]["redfish_system_id"] = system["uuid"]
            if not use_redfish:
                body["properties"]["fake_autoboot"] = True
                body["properties"]["fake_boot_delay"] = 0.5
            bodies.append(body)
            by_machine[system["uuid"]] = system["uuid"]
        client.post("/v1/machines", bodies)
        ids = [b["id"] for b in bodies]

        if use_redfish:
            _say(f"[4/5] migrating fake -> {target}: metalboot inserts the partition's iPXE "
                 f"ISO into each emulated BMC's virtual CD, sets a one-time Cd boot and "
                 f"resets the system. The emulator cannot boot, so a simulated machine "
                 f"reads the BMC's state, boots the ISO it holds and runs its "
                 f"autoexec.ipxe (fetches boot.ipxe by MAC): that fetch is the evidence.")
            simulated = SimulatedRedfishMachines(url, token, emulator_url, by_machine).start()
        else:
            _say(f"[4/5] migrating fake -> {target} with simulated boots (fake_autoboot: "
                 f"the server fetches each machine's boot URL itself after activation). "
                 f"Redfish path not used: {why_not}")
        migration = client.post("/v1/migrations", {
            "selector": {"machines": ids}, "boot_interface": target,
            "max_parallel": min(count, 10), "boot_timeout": 120})
        _say(f"      migration {migration['id']}")
        state = _DemoState(client)
        code = _watch(state, migration["id"], None, interval=0.5, timeout=timeout,
                      display=Display())
        if code == 130:
            raise KeyboardInterrupt
        if simulated:
            simulated.stop()

        _say("[5/5] result")
        for m in migration_machines(client, migration["id"]):
            evidence = m.get("evidence") or {}
            _say(f"      {m['machine_id']}  {m['state']:<12} evidence: "
                 f"{evidence.get('kind', '-')} {evidence.get('path', '')} "
                 f"{'after %.1f s' % m['seconds_to_evidence'] if m.get('seconds_to_evidence') is not None else ''}"  # noqa: E501
                 + (f"  error: {m['last_error']}" if m.get("last_error") else ""))
            for line in (simulated.log.get(m["machine_id"], []) if simulated else []):
                _say(f"          {line}")
        cli_ini = _write_cli_config(workdir, url, token_file)
        if exit_after:
            # the servers stop now: their URLs would lead nowhere
            _say("\n--exit: the BMC emulator and the server stop now. Run 'metalboot demo' "
                 "without --exit to keep them running and look at the API, the dashboard "
                 "and the CLI."
                 + (f" Logs and state stay in {workdir}." if state_dir else ""))
            return_code = code
        else:
            _print_where(url, token_file, cli_ini, emulator_url, ids[0], migration["id"],
                         target, use_redfish, why_not)
            _say("\nmetalboot demo keeps running; press Ctrl-C to stop it and clean up.")
            while all(proc.poll() is None for _, proc, _ in children.procs):
                time.sleep(0.5)
            dead = [name for name, proc, _ in children.procs if proc.poll() is not None]
            raise CliError(f"{', '.join(dead)} stopped unexpectedly; logs in {workdir}")
    except (KeyboardInterrupt, Terminated):
        click.echo("\nstopping the demo ...", err=True)
        return_code = 130 if code != 0 else 0
    except BaseException:
        return_code = None  # an error: keep the logs
        raise
    finally:
        if simulated:
            simulated.stop()
        children.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not state_dir:
            if return_code in (0, 130):
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                click.echo(f"metalboot demo: logs and state kept in {workdir}", err=True)
    sys.exit(return_code)


class _DemoState:
    """Enough of the CLI's context object for migrations._watch."""

    output = "table"

    def __init__(self, client):
        self.client = client


def _print_where(url, token_file, cli_ini, emulator_url, machine_id, migration_id, target,
                 use_redfish, why_not):
    _say("")
    _say("Where to look")
    _say(f"  API            {url}/v1   (OpenAPI document: {url}/v1/openapi.json)")
    _say(f"  dashboard      {url}/dashboard")
    _say(f"  admin token    {token_file}")
    if emulator_url:
        _say(f"  BMC emulator   {emulator_url}/redfish/v1/Systems   (sushy-tools, fake driver)")
    _say(f"  migration      {'fake -> ' + target}"
         + ("" if use_redfish else f"   (simulated with fake_autoboot: {why_not})"))
    _say("")
    _say("Try (in another shell):")
    _say(f"  export METALBOOT_CONFIG={cli_ini}")
    _say("  metalboot machines list")
    _say(f"  metalboot machines show {machine_id}")
    _say(f"  metalboot migrations show {migration_id} --machines")
    _say("  metalboot events tail -n 30")
    _say(f"  metalboot migrations create --partition {PARTITION} --to fake-alt --watch")
    if emulator_url:
        _say(f"  curl -s {emulator_url}/redfish/v1/Systems/{machine_id}/VirtualMedia/Cd")
    _say(f"  curl -s -H \"Authorization: Bearer $(cat {token_file})\" {url}/v1/migrations")

