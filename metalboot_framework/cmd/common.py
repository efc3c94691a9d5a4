"""What every command does first: parse configuration, set up logging."""

import logging
import sys

from oslo_config import cfg

from metalboot_framework import __version__
from metalboot_framework.conf import CONF

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parse_args(argv, description):
    try:
        CONF(argv, project="metalboot", version=__version__, description=description)
    except (cfg.Error, ValueError) as exc:
        fail(f"configuration error: {exc}")


def setup_logging(debug=False):
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, format=LOG_FORMAT,
                        stream=sys.stderr)
    for noisy in ("stevedore", "alembic.runtime.migration", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fail(message, code=1):
    """Stop with one clear line, no traceback."""
    print(f"{sys.argv[0].rsplit('/', 1)[-1]}: error: {message}", file=sys.stderr)
    raise SystemExit(code)
