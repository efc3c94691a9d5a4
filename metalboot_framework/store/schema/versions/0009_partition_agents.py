"""partition boot agents: agent tokens, the boot data change feed, delivered evidence

- ``partitions.boot_url``: where a partition's machines fetch what they boot
  (its boot agents' anycast URL); the revision trigger of 0006 counts it too.
- ``agent_tokens``: the bearer tokens of a partition's agents (their SHA-256).
- ``boot_changes``: a row for every change of what the agents of a partition
  serve, written by triggers so that every write counts, whichever code made
  it: a machine inserted, deleted, or updated in a column its snapshot is made
  of (its revision, bumped by 0006's triggers on NIC changes, included); a
  migration step of a machine (the by-MAC rule reads it); the partition's boot
  configuration. On PostgreSQL each row keeps its transaction id for the
  feed's sequencer (metalboot_framework.feed), as events do.
- ``boot_evidence.delivery``: the idempotency key of a row an agent delivered.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

# 0006's lists, and what this revision adds
MACHINE_COLUMNS = ("partition_id", "bmc_address", "bmc_username", "bmc_password",
                   "bmc_verify_tls", "boot_interface", "boot_mode", "state",
                   "prepared_interface", "properties", "token_generation")
OLD_PARTITION_COLUMNS = ("kernel_url", "initrd_url", "cmdline", "metal_boot_url",
                         "metal_hammer_version", "properties")
PARTITION_COLUMNS = OLD_PARTITION_COLUMNS + ("boot_url",)
CHANGE_INSERT = "INSERT INTO boot_changes (partition_id, machine_id) VALUES"


def _sqlite_triggers(columns):
    op.execute("DROP TRIGGER partitions_revision")
    op.execute(f"CREATE TRIGGER partitions_revision AFTER UPDATE OF {', '.join(columns)} "
               "ON partitions FOR EACH ROW WHEN NEW.revision = OLD.revision BEGIN "
               "UPDATE partitions SET revision = OLD.revision + 1 WHERE id = NEW.id; END")


def _sqlite_change_triggers():
    machine_columns = ", ".join(MACHINE_COLUMNS + ("revision",))
    op.execute("CREATE TRIGGER machines_change_insert AFTER INSERT ON machines FOR EACH ROW "
               f"BEGIN {CHANGE_INSERT} (NEW.partition_id, NEW.id); END")
    op.execute("CREATE TRIGGER machines_change_delete AFTER DELETE ON machines FOR EACH ROW "
               f"BEGIN {CHANGE_INSERT} (OLD.partition_id, OLD.id); END")
    op.execute(f"CREATE TRIGGER machines_change_update AFTER UPDATE OF {machine_columns} "
               f"ON machines FOR EACH ROW BEGIN {CHANGE_INSERT} (OLD.partition_id, OLD.id); "
               f"{CHANGE_INSERT.replace(' VALUES', '')} SELECT NEW.partition_id, NEW.id "
               "WHERE NEW.partition_id IS NOT OLD.partition_id; END")
    for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
        of = " OF state" if event == "UPDATE" else ""
        op.execute(f"CREATE TRIGGER migration_machines_change_{event.lower()} AFTER {event}{of} "
                   f"ON migration_machines FOR EACH ROW BEGIN "
                   f"{CHANGE_INSERT.replace(' VALUES', '')} SELECT partition_id, id "
                   f"FROM machines WHERE id = {row}.machine_id; END")
    op.execute(f"CREATE TRIGGER partitions_change AFTER UPDATE OF {', '.join(PARTITION_COLUMNS)} "
               f"ON partitions FOR EACH ROW BEGIN {CHANGE_INSERT} (NEW.id, NULL); END")


SQLITE_CHANGE_TRIGGERS = ("machines_change_insert", "machines_change_delete",
                          "machines_change_update", "migration_machines_change_insert",
                          "migration_machines_change_update", "migration_machines_change_delete",
                          "partitions_change")


def _postgresql_triggers(columns):
    op.execute("DROP TRIGGER partitions_revision ON partitions")
    op.execute(f"CREATE TRIGGER partitions_revision BEFORE UPDATE OF {', '.join(columns)} "
               "ON partitions FOR EACH ROW EXECUTE FUNCTION metalboot_bump_revision()")


def _postgresql_change_triggers():
    op.execute(
        "CREATE FUNCTION metalboot_machine_changed() RETURNS trigger AS $$ BEGIN "
        f"IF TG_OP <> 'INSERT' THEN {CHANGE_INSERT} (OLD.partition_id, OLD.id); END IF; "
        "IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND "
        "NEW.partition_id IS DISTINCT FROM OLD.partition_id) THEN "
        f"{CHANGE_INSERT} (NEW.partition_id, NEW.id); END IF; "
        "RETURN NULL; END $$ LANGUAGE plpgsql")
    op.execute("CREATE TRIGGER machines_change AFTER INSERT OR DELETE OR UPDATE OF "
               f"{', '.join(MACHINE_COLUMNS + ('revision',))} ON machines FOR EACH ROW "
               "EXECUTE FUNCTION metalboot_machine_changed()")
    op.execute(
        "CREATE FUNCTION metalboot_step_changed() RETURNS trigger AS $$ BEGIN "
        "INSERT INTO boot_changes (partition_id, machine_id) SELECT partition_id, id "
        "FROM machines WHERE id = CASE TG_OP WHEN 'DELETE' THEN OLD.machine_id "
        "ELSE NEW.machine_id END; RETURN NULL; END $$ LANGUAGE plpgsql")
    op.execute("CREATE TRIGGER migration_machines_change AFTER INSERT OR DELETE OR UPDATE OF "
               "state ON migration_machines FOR EACH ROW "
               "EXECUTE FUNCTION metalboot_step_changed()")
    op.execute(
        "CREATE FUNCTION metalboot_partition_changed() RETURNS trigger AS $$ BEGIN "
        f"{CHANGE_INSERT} (NEW.id, NULL); RETURN NULL; END $$ LANGUAGE plpgsql")
    op.execute(f"CREATE TRIGGER partitions_change AFTER UPDATE OF {', '.join(PARTITION_COLUMNS)} "
               "ON partitions FOR EACH ROW EXECUTE FUNCTION metalboot_partition_changed()")


def upgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column("partitions", sa.Column("boot_url", sa.Text(), nullable=True))
    op.add_column("boot_evidence", sa.Column("delivery", sa.String(160), nullable=True))
    op.create_index("ix_boot_evidence_delivery", "boot_evidence", ["delivery"], unique=True)
    op.create_table(
        "agent_tokens",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("partition_id", sa.String(128),
                  sa.ForeignKey("partitions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("last_used_at", sa.DateTime(), nullable=True))
    op.create_index("ix_agent_tokens_partition_id", "agent_tokens", ["partition_id"])
    op.create_table(
        "boot_changes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("partition_id", sa.String(128), nullable=False),
        sa.Column("machine_id", sa.String(64), nullable=True),
        sa.Column("xid", sa.BigInteger(), nullable=True,
                  server_default=sa.text("(pg_current_xact_id()::text)::bigint")
                  if postgres else None),
        sa.Column("feed_id", sa.BigInteger(), nullable=True))
    op.create_index("ix_boot_changes_partition", "boot_changes", ["partition_id", "id"])
    op.create_index("ix_boot_changes_feed", "boot_changes", ["partition_id", "feed_id"])
    if postgres:
        _postgresql_triggers(PARTITION_COLUMNS)
        _postgresql_change_triggers()
    else:
        _sqlite_triggers(PARTITION_COLUMNS)
        _sqlite_change_triggers()


def downgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        for trigger, table in (("machines_change", "machines"),
                               ("migration_machines_change", "migration_machines"),
                               ("partitions_change", "partitions")):
            op.execute(f"DROP TRIGGER {trigger} ON {table}")
        for function in ("metalboot_machine_changed", "metalboot_step_changed",
                         "metalboot_partition_changed"):
            op.execute(f"DROP FUNCTION {function}()")
        _postgresql_triggers(OLD_PARTITION_COLUMNS)
    else:
        for trigger in SQLITE_CHANGE_TRIGGERS:
            op.execute(f"DROP TRIGGER {trigger}")
        _sqlite_triggers(OLD_PARTITION_COLUMNS)
    op.drop_table("boot_changes")
    op.drop_table("agent_tokens")
    op.drop_index("ix_boot_evidence_delivery", "boot_evidence")
    # not batch_alter_table (see 0006): plain DROP COLUMN
    op.execute("ALTER TABLE boot_evidence DROP COLUMN delivery")
    op.execute("ALTER TABLE partitions DROP COLUMN boot_url")
