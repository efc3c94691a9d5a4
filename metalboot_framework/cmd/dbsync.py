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
        current = db.current_revision()
        if current is not None and _is_before(db, CONF.revision, current):
            common.fail(f"the database is at revision {current}, past {CONF.revision}: "
                        f"metalboot-dbsync only upgrades (restore a backup to go back)")
        db.upgrade(CONF.revision)
        print(f"database at revision {db.current_revision()}")
    except Exception as exc:  # one line for the operator, not a traceback
        common.fail(f"schema upgrade failed: {type(exc).__name__}: {exc}")
    return 0


def _is_before(db, revision, current):
    """Whether ``revision`` (a revision id, or "base") comes before ``current``:
    alembic's upgrade to it would do nothing and say nothing."""
    from alembic.script import ScriptDirectory
    script = ScriptDirectory.from_config(db.alembic_config(None))
    if revision == "base":
        return True
    if revision == "head" or script.get_revision(revision) is None:
        return False  # unknown revisions: alembic's own error
    return revision != current and revision in {
        r.revision for r in script.iterate_revisions(current, "base")}


if __name__ == "__main__":
    sys.exit(main())
