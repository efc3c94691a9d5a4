"""machines.revision and partitions.revision, kept by triggers

The boot server caches what a fetch needs of a machine (the machine, its NICs,
its partition) for ``[boot_server] cache_ttl`` seconds. When an entry expires
it asks only for these two numbers, and reloads the machine only when one of
them moved. Triggers keep them, so that every write counts, whichever code
(ORM, Core, a plain SQL statement, an operator's psql) made it:

- an UPDATE that sets any column a snapshot is made of bumps the row's revision
  (lock, error, drift and timestamp columns do not: they are not in it);
- an INSERT, UPDATE or DELETE of a NIC bumps its machine's revision.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

# The columns MachineInfo and PartitionInfo (metalboot_framework.snapshots) are made of.
MACHINE_COLUMNS = ("partition_id", "bmc_address", "bmc_username", "bmc_password",
                   "bmc_verify_tls", "boot_interface", "boot_mode", "state",
                   "prepared_interface", "properties", "token_generation")
PARTITION_COLUMNS = ("kernel_url", "initrd_url", "cmdline", "metal_boot_url",
                     "metal_hammer_version", "properties")


def _sqlite_triggers():
    for table, columns in (("machines", MACHINE_COLUMNS), ("partitions", PARTITION_COLUMNS)):
        # AFTER UPDATE OF: a statement that sets none of these columns (a lock,
        # an error) fires nothing; recursive triggers are off, and revision is
        # not in the list anyway
        op.execute(f"CREATE TRIGGER {table}_revision AFTER UPDATE OF {', '.join(columns)} "
                   f"ON {table} FOR EACH ROW WHEN NEW.revision = OLD.revision BEGIN "
                   f"UPDATE {table} SET revision = OLD.revision + 1 WHERE id = NEW.id; END")
    for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
        op.execute(f"CREATE TRIGGER nics_revision_{event.lower()} AFTER {event} ON nics "
                   f"FOR EACH ROW BEGIN UPDATE machines SET revision = revision + 1 "
                   f"WHERE id = {row}.machine_id; END")
    # a NIC moved to another machine changes both
    op.execute("CREATE TRIGGER nics_revision_move AFTER UPDATE OF machine_id ON nics "
               "FOR EACH ROW WHEN NEW.machine_id IS NOT OLD.machine_id BEGIN "
               "UPDATE machines SET revision = revision + 1 WHERE id = OLD.machine_id; END")


def _postgresql_triggers():
    op.execute("CREATE FUNCTION metalboot_bump_revision() RETURNS trigger AS $$ BEGIN "
               "IF NEW.revision = OLD.revision THEN NEW.revision := OLD.revision + 1; END IF; "
               "RETURN NEW; END $$ LANGUAGE plpgsql")
    for table, columns in (("machines", MACHINE_COLUMNS), ("partitions", PARTITION_COLUMNS)):
        op.execute(f"CREATE TRIGGER {table}_revision BEFORE UPDATE OF {', '.join(columns)} "
                   f"ON {table} FOR EACH ROW EXECUTE FUNCTION metalboot_bump_revision()")
    op.execute("CREATE FUNCTION metalboot_nic_changed() RETURNS trigger AS $$ BEGIN "
               "IF TG_OP <> 'INSERT' THEN "
               "UPDATE machines SET revision = revision + 1 WHERE id = OLD.machine_id; END IF; "
               "IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR "
               "NEW.machine_id IS DISTINCT FROM OLD.machine_id) THEN "
               "UPDATE machines SET revision = revision + 1 WHERE id = NEW.machine_id; END IF; "
               "RETURN NULL; END $$ LANGUAGE plpgsql")
    op.execute("CREATE TRIGGER nics_revision AFTER INSERT OR UPDATE OR DELETE ON nics "
               "FOR EACH ROW EXECUTE FUNCTION metalboot_nic_changed()")


def upgrade():
    for table in ("machines", "partitions"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('revision', sa.Integer(), nullable=False,
                                          server_default='1'))
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_triggers()
    else:
        _sqlite_triggers()


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER nics_revision ON nics")
        for table in ("machines", "partitions"):
            op.execute(f"DROP TRIGGER {table}_revision ON {table}")
        op.execute("DROP FUNCTION metalboot_nic_changed()")
        op.execute("DROP FUNCTION metalboot_bump_revision()")
    else:
        for name in ("nics_revision_insert", "nics_revision_update", "nics_revision_delete",
                     "nics_revision_move", "machines_revision", "partitions_revision"):
            op.execute(f"DROP TRIGGER {name}")
    for table in ("machines", "partitions"):
        # not batch_alter_table: on SQLite that copies the table, and dropping
        # the old machines table would delete every NIC (ON DELETE CASCADE)
        op.execute(f"ALTER TABLE {table} DROP COLUMN revision")
