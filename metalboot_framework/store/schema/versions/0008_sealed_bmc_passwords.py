"""machines.bmc_password: sealed with the key file instead of plain text

Seals every stored BMC password with the key of ``[database]
bmc_password_key_file`` (metalboot_framework.store.password_key), so that a
dump of the database reveals none. The key comes from the process running
the upgrade (metalboot-server, metalboot-dbsync); a database with passwords
cannot be upgraded without it. The downgrade opens them again.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import context, op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

machines = sa.table("machines", sa.column("id", sa.String), sa.column("bmc_password", sa.Text))


def _convert(change):
    conn = op.get_bind()
    rows = conn.execute(sa.select(machines.c.id, machines.c.bmc_password)
                        .where(machines.c.bmc_password.isnot(None))).all()
    if not rows:
        return
    key = context.config.attributes.get("password_key")
    if key is None:
        raise RuntimeError("the stored BMC passwords need the key file to be converted: "
                           "run metalboot-dbsync (or start metalboot-server), which read "
                           "[database] bmc_password_key_file")
    sqlite = conn.dialect.name == "sqlite"
    if sqlite:  # zeros, not the plain passwords, where the old values were
        conn.exec_driver_sql("PRAGMA secure_delete = ON")
    for row in rows:
        conn.execute(machines.update().where(machines.c.id == row.id)
                     .values(bmc_password=change(key, row.bmc_password)))
    if sqlite:
        conn.exec_driver_sql("PRAGMA secure_delete = OFF")


def upgrade():
    _convert(lambda key, password: key.seal(password))


def downgrade():
    _convert(lambda key, sealed: key.open(sealed))
