"""[DEFAULT]: which boot interfaces run, and where state lives."""

import os
import socket

from oslo_config import cfg


def _default_state_path():
    if os.environ.get("METALBOOT_STATE_DIR"):
        return os.environ["METALBOOT_STATE_DIR"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "metalboot")


opts = [
    # Two simulated paths by default, so that a fresh server can show a whole
    # migration (fake -> fake-alt) before any hardware is configured.
    cfg.ListOpt("enabled_boot_interfaces", default=["fake", "fake-alt"],
                help="Boot interfaces this deployment offers, by entry-point name in "
                     "the metalboot.boot_interfaces namespace. The server refuses "
                     "to start when one of them is not installed or fails to load."),
    cfg.StrOpt("default_boot_interface", default="fake",
               help="Boot interface given to a machine registered without one. "
                    "Must be one of enabled_boot_interfaces."),
    cfg.StrOpt("state_path", default=_default_state_path(),
               sample_default="$XDG_STATE_HOME/metalboot or ~/.local/state/metalboot",
               help="Directory for the SQLite database, the generated admin token "
                    "and the key that seals BMC passwords ([database] "
                    "bmc_password_key_file). The environment "
                    "variable METALBOOT_STATE_DIR overrides the built-in default."),
    cfg.StrOpt("host", default=socket.gethostname(), sample_default="<hostname>",
               help="Name of this conductor; it marks the machine locks it holds."),
    cfg.BoolOpt("debug", default=False, help="Log at DEBUG level."),
    cfg.StrOpt("log_format", default="text", choices=[("text", "plain text lines"),
                                                 ("json", "one JSON object per line")],
               help="Format of the log lines on standard error. 'text': "
                    "'<time> <level> <logger> [<request id>]: <message>'. 'json': one "
                    "JSON object per line with time, level, logger, message, "
                    "request_id (lines written while handling an API request) and "
                    "fields such as migration_id and machine_id. In both, BMC "
                    "passwords, API tokens and per-machine tokens (also inside "
                    "artifact URLs) are masked as ``***``."),
    cfg.ListOpt("disabled_hooks", default=[],
                help="Entry-point names in metalboot.hooks that are installed but "
                     "must not be registered."),
]


def register_opts(conf):
    conf.register_opts(opts)


def list_opts():
    return [("DEFAULT", opts)]
