"""The alembic revisions build exactly the schema the models describe."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from metalboot_framework.store.db import Database
from metalboot_framework.store.models import Base


def test_migrations_match_models(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    assert db.current_revision() is not None
    with db.write_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_upgrade_is_repeatable(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/m.sqlite")
    db.upgrade()
    first = db.current_revision()
    db.upgrade()
    assert db.current_revision() == first
