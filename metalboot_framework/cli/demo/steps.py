"""The steps of ``metalboot demo``, in the order the command runs them.

Each step prints its ``[n/5]`` line, does its part and records what later
steps need on the ``Demo``.
"""

import os
import shutil
import tempfile
import time

import click

from metalboot_framework.cli.client import EXIT_FAILED, CliError, Client
from metalboot_framework.cli.demo.emulator import emulated_systems, start_emulator
from metalboot_framework.cli.demo.firmware import SimulatedRedfishMachines
from metalboot_framework.cli.demo.processes import Children
from metalboot_framework.cli.demo.server import start_server
from metalboot_framework.cli.migrations import Display, _watch, migration_machines

PARTITION = "demo"
BMC_USER, BMC_PASSWORD = "admin", "demo-password"


def say(text=""):
    click.echo(text)


class Demo:
    """What the demo started and learned so far; each step reads and adds to it."""

    def __init__(self, count, plan, ipxe_efi, port, timeout, state_dir):
        self.count, self.plan, self.ipxe_efi = count, plan, ipxe_efi
        self.port, self.timeout = port, timeout
        self.keep_state = bool(state_dir)  # a --state-dir is kept; a temporary one is not
        self.workdir = os.path.abspath(state_dir) if state_dir else tempfile.mkdtemp(
            prefix="metalboot-demo-")
        os.makedirs(self.workdir, exist_ok=True)
        self.systems = emulated_systems(count)
        self.children = Children()
        self.simulated = None  # SimulatedRedfishMachines on the Redfish path
        self.emulator_url = None
        self.url = self.token_file = self.token = self.client = None
        self.machine_ids = []
        self.migration_id = None
        self.cli_ini = None
        self.code = EXIT_FAILED  # the migration watch's exit code

    def stop(self):
        """Stops what the demo started."""
        if self.simulated:
            self.simulated.stop()
        self.children.stop_all()

    def remove_or_keep_workdir(self, return_code):
        """A temporary state directory goes unless the demo failed: then its logs help."""
        if self.keep_state:
            return
        if return_code in (0, 130):
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            click.echo(f"metalboot demo: logs and state kept in {self.workdir}", err=True)


class _WatchContext:
    """Enough of the CLI's context object for migrations._watch."""

    output = "table"

    def __init__(self, client):
        self.client = client


def start_bmc_emulator(demo):
    if not demo.plan.have_emulator:
        say(f"[1/5] no BMC emulator: {demo.plan.why_not}")
        return
    say(f"[1/5] starting a Redfish BMC emulator (sushy-tools, fake driver, "
        f"{demo.count} systems)")
    demo.emulator_url = start_emulator(demo.children, os.path.join(demo.workdir, "emulator"),
                                       demo.systems)
    say(f"      {demo.emulator_url}/redfish/v1/Systems")


def start_metalboot_server(demo):
    interfaces = demo.plan.interfaces
    say(f"[2/5] starting metalboot-server (boot interfaces: {', '.join(interfaces)})")
    demo.url, demo.token_file, demo.token = start_server(
        demo.children, demo.workdir, interfaces, demo.ipxe_efi, demo.port)
    say(f"      {demo.url}/v1   (state: {demo.workdir})")
    demo.client = Client(demo.url, demo.token, timeout=60)


def register_machines(demo):
    say(f"[3/5] registering partition {PARTITION} and {demo.count} machines on boot "
        f"interface fake")
    demo.client.post("/v1/partitions", {
        "id": PARTITION, "description": "created by metalboot demo",
        "boot": {"kernel_url": f"{demo.url}/images/metal-hammer/vmlinuz",
                 "initrd_url": f"{demo.url}/images/metal-hammer/initrd.img",
                 "cmdline": "console=ttyS0", "metal_hammer_version": "demo"}})
    bodies = [machine_body(system, demo.emulator_url, demo.plan.use_redfish)
              for system in demo.systems]
    demo.client.post("/v1/machines", bodies)
    demo.machine_ids = [b["id"] for b in bodies]


def machine_body(system, emulator_url, use_redfish):
    """The registration of one emulated system: its emulated BMC if any, else fake boots."""
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
    return body


def migrate(demo):
    """Migrates every machine and watches until the migration ends (Ctrl-C stops the demo)."""
    plan = demo.plan
    if plan.use_redfish:
        say(f"[4/5] migrating fake -> {plan.target}: metalboot inserts the partition's iPXE "
            f"ISO into each emulated BMC's virtual CD, sets a one-time Cd boot and "
            f"resets the system. The emulator cannot boot, so a simulated machine "
            f"reads the BMC's state, boots the ISO it holds and runs its "
            f"autoexec.ipxe (fetches boot.ipxe by MAC): that fetch is the evidence.")
        # the machine id is the emulated system's id
        demo.simulated = SimulatedRedfishMachines(
            demo.url, demo.token, demo.emulator_url,
            {machine_id: machine_id for machine_id in demo.machine_ids}).start()
    else:
        say(f"[4/5] migrating fake -> {plan.target} with simulated boots (fake_autoboot: "
            f"the server fetches each machine's boot URL itself after activation). "
            f"Redfish path not used: {plan.why_not}")
    migration = demo.client.post("/v1/migrations", {
        "selector": {"machines": demo.machine_ids}, "boot_interface": plan.target,
        "max_parallel": min(demo.count, 10), "boot_timeout": 120})
    demo.migration_id = migration["id"]
    say(f"      migration {demo.migration_id}")
    demo.code = _watch(_WatchContext(demo.client), demo.migration_id, None, interval=0.5,
                       timeout=demo.timeout, display=Display())
    if demo.code == 130:
        raise KeyboardInterrupt
    if demo.simulated:
        demo.simulated.stop()


def show_result(demo):
    """Each machine's state and evidence, and what its simulated firmware did."""
    say("[5/5] result")
    firmware_log = demo.simulated.log if demo.simulated else {}
    for m in migration_machines(demo.client, demo.migration_id):
        evidence = m.get("evidence") or {}
        seconds = m.get("seconds_to_evidence")
        say(f"      {m['machine_id']}  {m['state']:<12} evidence: "
            f"{evidence.get('kind', '-')} {evidence.get('path', '')} "
            f"{'after %.1f s' % seconds if seconds is not None else ''}"
            + (f"  error: {m['last_error']}" if m.get("last_error") else ""))
        for line in firmware_log.get(m["machine_id"], []):
            say(f"          {line}")


def write_cli_config(demo):
    """A CLI configuration file pointing at the demo's server, for the commands it suggests."""
    demo.cli_ini = os.path.join(demo.workdir, "cli.ini")
    with open(demo.cli_ini, "w") as f:
        f.write(f"[metalboot]\nurl = {demo.url}\ntoken_file = {demo.token_file}\n")


def say_everything_stops(demo):
    # the servers stop now: their URLs would lead nowhere
    say("\n--exit: the BMC emulator and the server stop now. Run 'metalboot demo' "
        "without --exit to keep them running and look at the API, the dashboard "
        "and the CLI."
        + (f" Logs and state stay in {demo.workdir}." if demo.keep_state else ""))


def keep_running(demo):
    """Shows where to look, then runs until Ctrl-C; CliError if a child process dies."""
    print_where(demo)
    say("\nmetalboot demo keeps running; press Ctrl-C to stop it and clean up.")
    while demo.children.all_alive():
        time.sleep(0.5)
    raise CliError(f"{', '.join(demo.children.dead())} stopped unexpectedly; "
                   f"logs in {demo.workdir}")


def print_where(demo):
    url, token_file, emulator_url = demo.url, demo.token_file, demo.emulator_url
    machine_id, plan = demo.machine_ids[0], demo.plan
    say("")
    say("Where to look")
    say(f"  API            {url}/v1   (OpenAPI document: {url}/v1/openapi.json)")
    say(f"  dashboard      {url}/dashboard")
    say(f"  admin token    {token_file}")
    if emulator_url:
        say(f"  BMC emulator   {emulator_url}/redfish/v1/Systems   (sushy-tools, fake driver)")
    say(f"  migration      {'fake -> ' + plan.target}"
        + ("" if plan.use_redfish else f"   (simulated with fake_autoboot: {plan.why_not})"))
    say("")
    say("Try (in another shell):")
    say(f"  export METALBOOT_CONFIG={demo.cli_ini}")
    say("  metalboot machines list")
    say(f"  metalboot machines show {machine_id}")
    say(f"  metalboot migrations show {demo.migration_id} --machines")
    say("  metalboot events tail -n 30")
    say(f"  metalboot migrations create --partition {PARTITION} --to fake-alt --watch")
    if emulator_url:
        say(f"  curl -s {emulator_url}/redfish/v1/Systems/{machine_id}/VirtualMedia/Cd")
    say(f"  curl -s -H \"Authorization: Bearer $(cat {token_file})\" {url}/v1/migrations")
