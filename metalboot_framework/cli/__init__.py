"""``metalboot``: the command-line client of the metalboot REST API.

It talks to a metalboot-server over HTTP only (see :mod:`.client`); one module
per command group. Exit codes: 0 ok, 1 API error or failed migration, 2 usage
error, 3 connection error, 4 authentication/authorization error.
"""

import os
import sys

import click

from metalboot_framework.cli import config as cli_config
from metalboot_framework.cli.client import (EXIT_AUTH, EXIT_CONNECTION, EXIT_FAILED,
                                            EXIT_USAGE, CliError, Client)
from metalboot_framework.cli.output import FORMATS

EPILOG = f"""\b
Exit codes:
  {0}  success
  {EXIT_FAILED}  the API answered with an error, a validation failed, or a
     migration finished with failed machines (halted, cancelled, rolled back)
  {EXIT_USAGE}  usage error (bad flag, missing argument, unreadable file)
  {EXIT_CONNECTION}  the server could not be reached
  {EXIT_AUTH}  no token, unknown token, or a reader's token for a change

\b
URL and token: --url/--token, else METALBOOT_URL/METALBOOT_TOKEN, else the
config file (--config, METALBOOT_CONFIG, ~/.config/metalboot/cli.ini).
"""


class State:
    """What every command gets as ``ctx.obj``."""

    def __init__(self, url, token, config, output, timeout):
        self._given = (url, token, config)
        self.output = output
        self.timeout = timeout
        self._client = None

    @property
    def client(self):
        if self._client is None:
            url, token, _ = cli_config.resolve(*self._given)
            self._client = Client(url, token, timeout=self.timeout)
        return self._client


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"],
                                              "max_content_width": 100})
@click.option("--url", metavar="URL", help="API URL, e.g. http://127.0.0.1:6480 "
              "[env METALBOOT_URL].")
@click.option("--token", metavar="TOKEN", help="Bearer token [env METALBOOT_TOKEN].")
@click.option("--config", "config", metavar="FILE", type=click.Path(dir_okay=False),
              help="CLI config file (default ~/.config/metalboot/cli.ini) "
                   "[env METALBOOT_CONFIG].")
@click.option("-o", "--output", type=click.Choice(FORMATS), default=None,
              help="Output format of every command (default: table).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="Seconds to wait for each API answer.")
@click.version_option(package_name="metalboot", prog_name="metalboot")
@click.pass_context
def cli(ctx, url, token, config, output, timeout):
    """Manage machines, partitions and boot-interface migrations of a metalboot server."""
    ctx.obj = State(url, token, config, output, timeout)


def _register():
    from metalboot_framework.cli import (boot_interfaces, demo, events, machines, migrations,
                                         partitions)
    for module in (machines, partitions, boot_interfaces, migrations, events, demo):
        cli.add_command(module.group)


_register()


def main(argv=None):
    """Console-script entry point: never a traceback, always a documented exit code."""
    try:
        return cli.main(args=argv, prog_name="metalboot", standalone_mode=True)
    except SystemExit:
        raise
    except CliError as exc:  # raised outside click's own handling
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get("METALBOOT_DEBUG"):
            raise
        click.echo(f"metalboot: error: unexpected {type(exc).__name__}: {exc} "
                   f"(set METALBOOT_DEBUG=1 for a traceback)", err=True)
        sys.exit(EXIT_FAILED)
