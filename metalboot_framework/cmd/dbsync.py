"""metalboot-dbsync: bring the database schema to the newest revision."""

import sys

from oslo_config import cfg

from metalboot_framework.cmd import common
from metalboot_framework.conf import CONF
from metalboot_framework.store.db import Database

cli_opts = [
    cfg.StrOpt("revision", default="head", positional=True, required=False,
               help="Alembic revision to upgrade to (default: head)."),
    cfg.BoolOpt("show", default=False, help="Only print the current revision."),
]


def main(argv=None):
    CONF.register_cli_opts(cli_opts)
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      "Upgrade the metalboot database schema.")
    common.setup_logging()
    try:
        db = Database(CONF.database.connection)
        if CONF.show:
            print(db.current_revision() or "empty")
            return 0
        db.upgrade(CONF.revision)
        print(f"database at revision {db.current_revision()}")
    except Exception as exc:  # one line for the operator, not a traceback
        common.fail(f"schema upgrade failed: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
