"""migration_machines (state, updated_at): the scheduler's looks at machines
awaiting boot across all migrations read an index instead of every row

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade():
    op.create_index('ix_migration_machines_step_updated', 'migration_machines',
                    ['state', 'updated_at'], unique=False)


def downgrade():
    op.drop_index('ix_migration_machines_step_updated', table_name='migration_machines')
