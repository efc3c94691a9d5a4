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

The modules: ``plan`` (which path this machine can run), ``steps`` (what the
command does, in order), ``emulator`` and ``server`` (the child processes),
``firmware`` (the simulated machines), ``processes`` (starting and stopping
children, signals).
"""

import sys

import click

from metalboot_framework.cli.client import CliError
from metalboot_framework.cli.demo import steps
from metalboot_framework.cli.demo.plan import choose_plan
from metalboot_framework.cli.demo.processes import Terminated, stop_signals_raise_terminated

DEFAULT_IPXE_EFI = "/usr/lib/ipxe/ipxe.efi"


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
    if sys.platform != "linux":
        raise CliError("the demo runs on Linux only")
    plan = choose_plan(interface, ipxe_efi)
    demo = steps.Demo(count, plan, ipxe_efi, port, timeout, state_dir)
    return_code = None  # an error: the temporary state directory stays, with the logs
    try:
        with stop_signals_raise_terminated():
            return_code = run(demo, exit_after)
    finally:
        demo.remove_or_keep_workdir(return_code)
    sys.exit(return_code)


def run(demo, exit_after):
    """The demo's steps; whatever happens, what they started stops. The exit code."""
    try:
        steps.start_bmc_emulator(demo)
        steps.start_metalboot_server(demo)
        steps.register_machines(demo)
        steps.migrate(demo)
        steps.show_result(demo)
        steps.write_cli_config(demo)
        if exit_after:
            steps.say_everything_stops(demo)
            return demo.code
        steps.keep_running(demo)  # until Ctrl-C; raises if a child process dies
    except (KeyboardInterrupt, Terminated):
        click.echo("\nstopping the demo ...", err=True)
        return 130 if demo.code != 0 else 0
    finally:
        demo.stop()
