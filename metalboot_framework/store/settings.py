"""Deployment-wide values kept in the database (``settings``), each made once
by whichever process needs it first."""

import sqlalchemy.exc

from metalboot_framework.store import models


def get_or_create(db, key, make):
    """The value of setting ``key``, stored as ``make()`` if there is none yet.
    Called before the process's write interface exists (at start-up): a
    transaction of the database's own."""
    for _ in range(2):
        try:
            with db.write() as session:
                row = session.get(models.Setting, key)
                if row is None:
                    row = models.Setting(key=key, value=make())
                    session.add(row)
                return row.value
        except sqlalchemy.exc.IntegrityError:
            continue  # another process created it first: read theirs
    raise RuntimeError(f"cannot read or create the setting {key}")
