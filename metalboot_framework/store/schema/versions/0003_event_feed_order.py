"""events.xid and events.feed_id: a feed cursor that never skips an event

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.add_column(sa.Column(
            'xid', sa.BigInteger(), nullable=True,
            server_default=sa.text("(pg_current_xact_id()::text)::bigint") if postgres
            else None))
        batch_op.add_column(sa.Column('feed_id', sa.BigInteger(), nullable=True))
        batch_op.create_index('ix_events_feed_id', ['feed_id'], unique=False)


def downgrade():
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_feed_id')
        batch_op.drop_column('feed_id')
        batch_op.drop_column('xid')
