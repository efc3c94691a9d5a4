"""DHCP at the partition: published DHCP entries, what each agent applied

- ``dhcp_entries``: per machine and boot interface, the server-neutral host
  entries its partition's DHCP servers answer; a trigger writes a
  ``boot_changes`` row for every insert, update and delete, so that the
  partition's boot agents hear of it on the boot data feed.
- ``dhcp_agents``: per partition and agent, the boot data cursor up to which
  the agent's DHCP servers hold the entries, and its last error.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

CHANGE = ("INSERT INTO boot_changes (partition_id, machine_id) SELECT partition_id, id "
          "FROM machines WHERE id = {row}.machine_id")


def upgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "dhcp_entries",
        sa.Column("machine_id", sa.String(64),
                  sa.ForeignKey("machines.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("interface", sa.String(64), primary_key=True),
        sa.Column("entries", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False))
    op.create_table(
        "dhcp_agents",
        sa.Column("partition_id", sa.String(128),
                  sa.ForeignKey("partitions.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("agent_id", sa.String(64), primary_key=True),
        sa.Column("interfaces", sa.JSON(), nullable=False),
        sa.Column("applied_cursor", sa.BigInteger(), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reported_at", sa.DateTime(), nullable=False))
    if postgres:
        op.execute(
            "CREATE FUNCTION metalboot_dhcp_changed() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO boot_changes (partition_id, machine_id) SELECT partition_id, id "
            "FROM machines WHERE id = CASE TG_OP WHEN 'DELETE' THEN OLD.machine_id "
            "ELSE NEW.machine_id END; RETURN NULL; END $$ LANGUAGE plpgsql")
        op.execute("CREATE TRIGGER dhcp_entries_change AFTER INSERT OR DELETE OR UPDATE "
                   "ON dhcp_entries FOR EACH ROW EXECUTE FUNCTION metalboot_dhcp_changed()")
    else:
        for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            op.execute(f"CREATE TRIGGER dhcp_entries_change_{event.lower()} AFTER {event} "
                       f"ON dhcp_entries FOR EACH ROW BEGIN {CHANGE.format(row=row)}; END")


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER dhcp_entries_change ON dhcp_entries")
        op.execute("DROP FUNCTION metalboot_dhcp_changed()")
    else:
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER dhcp_entries_change_{event}")
    op.drop_table("dhcp_agents")
    op.drop_table("dhcp_entries")
