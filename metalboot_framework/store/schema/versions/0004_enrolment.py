"""machines.prepared_interface and machines.last_error: enrolment

A machine is ``enrolling`` until the conductor has prepared its boot interface
(DHCP entries, BMC settings); prepared_interface records what it was prepared
for. Machines that exist at upgrade time keep running as before: they count as
prepared for their current interface.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('machines', schema=None) as batch_op:
        batch_op.add_column(sa.Column('prepared_interface', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('last_error', sa.Text(), nullable=True))
    op.execute("UPDATE machines SET prepared_interface = boot_interface")


def downgrade():
    op.execute("UPDATE machines SET state = 'ready' WHERE state = 'enrolling'")
    # not batch_alter_table: on SQLite that copies the table, and dropping the
    # old machines table would delete every NIC (ON DELETE CASCADE)
    op.execute("ALTER TABLE machines DROP COLUMN last_error")
    op.execute("ALTER TABLE machines DROP COLUMN prepared_interface")
