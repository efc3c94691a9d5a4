"""What every command does first: parse configuration, set up logging."""

import contextlib
import logging
import re
import sys

from oslo_config import cfg

from metalboot_framework import __version__, logs
from metalboot_framework.conf import CONF
from metalboot_framework.exceptions import PluginLoadError

LOG_FORMAT = logs.TEXT_FORMAT


def parse_args(argv, description):
    try:
        CONF(argv, project="metalboot", version=__version__, description=description)
    except (cfg.Error, ValueError) as exc:
        fail(f"configuration error: {exc}")
    check_options()


def check_options(conf=CONF):
    """Read every option registered so far, so that a bad value stops the
    command now with one line naming it: oslo.config checks a value only when
    it is first read, which for some is in a thread hours later. Call it again
    once plugins have registered theirs."""
    for name in conf:  # DEFAULT's options and the groups
        try:
            value = conf[name]
        except (cfg.Error, ValueError) as exc:
            fail(f"configuration error: [DEFAULT] {name}: {_reason(exc)}")
        if not isinstance(value, cfg.ConfigOpts.GroupAttr):
            continue
        for option in value:
            try:
                value[option]
            except (cfg.Error, ValueError) as exc:
                fail(f"configuration error: [{name}] {option}: {_reason(exc)}")


def _reason(exc):
    """oslo.config's message without the option's name (the caller gives it)
    and with the file it came from instead of a LocationInfo repr."""
    message = getattr(exc, "msg", None) or str(exc)
    found = re.search(r"LocationInfo\(.*detail='([^']*)'\) is not valid: (.*)", message, re.S)
    if found:
        return f"{found.group(2)} (in {found.group(1)})"
    return message.split(" is not valid: ", 1)[-1]


def setup_logging(debug=False, log_format=None, queued=False):
    """Log to stderr as ``[DEFAULT] log_format`` says, with request ids and
    secrets masked on every line (:mod:`metalboot_framework.logs`).

    ``queued``: lines are written by a thread of their own
    (:class:`metalboot_framework.logs.QueuedHandler`), for a process of many
    threads that log (the conductor's workers); not for a process that forks
    after this (the listener thread would not be in the child).
    """
    if log_format is None:
        log_format = getattr(CONF, "log_format", None) or "text"
    # Neither format shows where a line was logged from: skip the stack walk
    # that finds it (the Logging HOWTO's "Optimization"): a conductor logs a
    # line per machine and step
    logging._srcfile = None
    logging.logProcesses = logging.logMultiprocessing = False
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, format=LOG_FORMAT,
                        stream=sys.stderr)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if queued:
            root.removeHandler(handler)
            root.addHandler(logs.install_queued(handler, log_format))
        else:
            logs.install(handler, log_format)
    for noisy in ("stevedore", "alembic.runtime.migration", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextlib.contextmanager
def interrupted_quietly():
    """Ctrl-C before a command has installed its own SIGINT handler (while it
    loads plugins or upgrades the schema): one line and status 130, not a
    KeyboardInterrupt traceback."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"{sys.argv[0].rsplit('/', 1)[-1]}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def fail(message, code=1):
    """Stop with one clear line, no traceback."""
    print(f"{sys.argv[0].rsplit('/', 1)[-1]}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def load_services():
    """The process's :class:`~metalboot_framework.services.Services` from its
    configuration; a plugin or the database that cannot load ends the process
    with one line that says why."""
    from metalboot_framework.services import Services  # not for the CLI's quick commands
    try:
        services = Services.from_conf(CONF)
    except PluginLoadError as exc:
        fail(str(exc))
    except Exception as exc:
        fail(f"cannot start: {type(exc).__name__}: {exc}")
    check_options()  # the plugins' options too
    return services
