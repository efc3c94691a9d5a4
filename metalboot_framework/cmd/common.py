"""What every command does first: parse configuration, set up logging."""

import logging
import sys

from oslo_config import cfg

from metalboot_framework import __version__, logs
from metalboot_framework.conf import CONF

LOG_FORMAT = logs.TEXT_FORMAT


def parse_args(argv, description):
    try:
        CONF(argv, project="metalboot", version=__version__, description=description)
    except (cfg.Error, ValueError) as exc:
        fail(f"configuration error: {exc}")


def setup_logging(debug=False, log_format=None):
    """Log to stderr as ``[DEFAULT] log_format`` says, with request ids and
    secrets masked on every line (:mod:`metalboot_framework.logs`)."""
    if log_format is None:
        log_format = getattr(CONF, "log_format", None) or "text"
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, format=LOG_FORMAT,
                        stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        logs.install(handler, log_format)
    for noisy in ("stevedore", "alembic.runtime.migration", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fail(message, code=1):
    """Stop with one clear line, no traceback."""
    print(f"{sys.argv[0].rsplit('/', 1)[-1]}: error: {message}", file=sys.stderr)
    raise SystemExit(code)
