"""metalboot-dbsync: bring the database schema to the newest revision, or
replace the key that seals BMC passwords (``metalboot-dbsync rotate-key``)."""

import os
import sys

from oslo_config import cfg

from metalboot_framework.cmd import common
from metalboot_framework.conf import CONF
from metalboot_framework.store import password_key
from metalboot_framework.store.db import Database

ROTATE_KEY = "rotate-key"

cli_opts = [
    cfg.StrOpt("revision", default="head", positional=True, required=False,
               help="Alembic revision to upgrade to (default: head); or "
                    f"'{ROTATE_KEY}': seal every BMC password with a new key and "
                    "retire the old one (the schema must be at head)."),
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
        if CONF.revision == ROTATE_KEY:
            return _rotate_key(db)
        current = db.current_revision()
        if current is not None and _is_before(db, CONF.revision, current):
            common.fail(f"the database is at revision {current}, past {CONF.revision}: "
                        f"metalboot-dbsync only upgrades (restore a backup to go back)")
        key = password_key.load(CONF.database.bmc_password_key_file, db)
        db.upgrade(CONF.revision, password_key=key)
        if _is_at_head(db):
            password_key.check(key, db)
        print(f"database at revision {db.current_revision()}")
    except password_key.PasswordKeyError as exc:
        common.fail(str(exc))
    except Exception as exc:  # one line for the operator, not a traceback
        common.fail(f"schema upgrade failed: {type(exc).__name__}: {exc}")
    return 0


def _rotate_key(db):
    """Seal every stored BMC password with a new key, then retire the old
    keys (crash-safe: see :func:`password_key.rotate`)."""
    if not _is_at_head(db):
        common.fail(f"the database is at revision {db.current_revision() or 'empty'}: "
                    f"upgrade it (metalboot-dbsync) before {ROTATE_KEY}")
    path = CONF.database.bmc_password_key_file
    if not os.path.exists(path):
        common.fail(f"no BMC password key file at {path} to rotate "
                    f"([database] bmc_password_key_file)")
    key = password_key.load(path, db)
    password_key.check(key, db)
    try:
        count = password_key.rotate(key, db)
    except Exception as exc:
        common.fail(f"key rotation stopped: {type(exc).__name__}: {exc}; every password "
                    f"still opens with the keys in {path}: run {ROTATE_KEY} again")
    print(f"sealed {count} BMC password(s) with a new key in {path}; the old key is "
          f"retired (database backups made before need the key file of their time)")
    return 0


def _is_at_head(db):
    from alembic.script import ScriptDirectory
    script = ScriptDirectory.from_config(db.alembic_config(None))
    return db.current_revision() == script.get_current_head()


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
