"""migrations.result, and halting for a halt with machines still in flight

A finished migration records how it went for its machines (succeeded,
partially_failed, failed, not_run): its state alone says ``done`` even when
every machine was rolled back. Migrations finished before the upgrade get the
result their machines' steps give. A migration halted while machines were
still in flight (state halted, no finished_at) is ``halting`` until they end.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# As in metalboot_framework.migration_states, as of this revision.
_SUCCEEDED = "('done', 'valid')"
_FAILED = "('rolled_back', 'rollback_failed', 'invalid')"


def _machines(steps):
    return (f"EXISTS (SELECT 1 FROM migration_machines mm WHERE mm.migration_id = "
            f"migrations.id AND mm.state IN {steps})")


def upgrade():
    op.add_column('migrations', sa.Column('result', sa.String(length=32), nullable=True))
    op.execute("UPDATE migrations SET state = 'halting' "
               "WHERE state = 'halted' AND finished_at IS NULL")
    ok, failed = _machines(_SUCCEEDED), _machines(_FAILED)
    op.execute(f"UPDATE migrations SET result = CASE "
               f"WHEN {failed} AND {ok} THEN 'partially_failed' "
               f"WHEN {failed} THEN 'failed' "
               f"WHEN {ok} THEN 'succeeded' ELSE 'not_run' END "
               f"WHERE state IN ('done', 'halted', 'cancelled')")


def downgrade():
    op.execute("UPDATE migrations SET state = 'halted' WHERE state = 'halting'")
    # not batch_alter_table: on SQLite that copies the table, and dropping the
    # old migrations table would delete their machines (ON DELETE CASCADE)
    op.execute("ALTER TABLE migrations DROP COLUMN result")
