"""Tables. Schema changes go through an alembic revision in schema/versions."""

import datetime

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, ForeignKey, Index,
                        Integer, String, Text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from metalboot_framework.machine_lifecycle import State
from metalboot_framework.machine_steps import Step


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Partition(Base):
    """A failure domain with one boot configuration; it may change any time."""

    __tablename__ = "partitions"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    kernel_url: Mapped[str | None] = mapped_column(Text)
    initrd_url: Mapped[str | None] = mapped_column(Text)
    cmdline: Mapped[str] = mapped_column(Text, default="")
    metal_boot_url: Mapped[str | None] = mapped_column(Text)
    metal_hammer_version: Mapped[str | None] = mapped_column(String(128))
    # Where the partition's machines fetch artifacts and post boot reports: its
    # boot agents' (anycast) URL; None: [api] public_url.
    boot_url: Mapped[str | None] = mapped_column(Text)
    properties: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # Bumped by a trigger whenever what the boot server caches of this partition
    # changes (store/schema/versions/0006): its cache revalidates by it.
    revision: Mapped[int] = mapped_column(Integer, server_default="1")
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class Machine(Base):
    """A bare-metal server, keyed by metal-api's machine UUID."""

    __tablename__ = "machines"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    partition_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("partitions.id", ondelete="RESTRICT"), index=True)
    bmc_address: Mapped[str | None] = mapped_column(Text)
    bmc_username: Mapped[str | None] = mapped_column(String(255))
    bmc_password: Mapped[str | None] = mapped_column(Text)  # write-only in the API
    bmc_verify_tls: Mapped[bool] = mapped_column(Boolean, default=True)
    boot_interface: Mapped[str] = mapped_column(String(64), index=True)
    boot_mode: Mapped[str] = mapped_column(String(8), default="uefi")
    state: Mapped[str] = mapped_column(String(32), default=State.ENROLLING.value, index=True)
    # The interface the machine's DHCP entries / BMC settings were last prepared
    # for; differs from boot_interface until the conductor has enrolled it.
    prepared_interface: Mapped[str | None] = mapped_column(String(64))
    last_error: Mapped[str | None] = mapped_column(Text)
    properties: Mapped[dict] = mapped_column(JSON, default=dict)
    # Lock: the conductor (or API process) that holds the machine, and since when.
    reservation: Mapped[str | None] = mapped_column(String(255))
    reserved_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    # Bumping the generation revokes every token issued to the machine before.
    token_generation: Mapped[int] = mapped_column(Integer, default=1)
    drift: Mapped[list | None] = mapped_column(JSON)
    drift_checked_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # Bumped by a trigger whenever what the boot server caches of this machine (NICs included)
    # changes (store/schema/versions/0006): its cache revalidates by it.
    revision: Mapped[int] = mapped_column(Integer, server_default="1")
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class Nic(Base):
    """A network interface; its MAC (and DUID) identify the machine to DHCP."""

    __tablename__ = "nics"

    mac: Mapped[str] = mapped_column(String(17), primary_key=True)
    machine_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("machines.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    duid: Mapped[str | None] = mapped_column(String(400), unique=True)
    ipv4_address: Mapped[str | None] = mapped_column(String(15))
    ipv6_address: Mapped[str | None] = mapped_column(String(39))


class Event(Base):
    """Append-only history; the id is the cursor of GET /v1/events."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    machine_id: Mapped[str | None] = mapped_column(String(64))
    migration_id: Mapped[str | None] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # PostgreSQL only: the writing transaction (server default) and the position
    # in the feed, given once that transaction can no longer be in progress.
    # See metalboot_framework.feed.
    xid: Mapped[int | None] = mapped_column(BigInteger)
    feed_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        Index("ix_events_machine", "machine_id", "id"),
        Index("ix_events_migration", "migration_id", "id"),
        Index("ix_events_feed_id", "feed_id"),
    )


class BootEvidence(Base):
    """Each artifact fetch and boot report, with time and client address."""

    __tablename__ = "boot_evidence"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    machine_id: Mapped[str] = mapped_column(String(64))
    interface: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # fetch | report
    path: Mapped[str] = mapped_column(Text, default="")
    client_address: Mapped[str | None] = mapped_column(String(64))
    data: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # "<agent id>:<journal id>:<sequence>" of a row a partition's boot agent
    # delivered: delivered twice, stored once. None for rows written here.
    delivery: Mapped[str | None] = mapped_column(String(160))

    __table_args__ = (Index("ix_boot_evidence_machine", "machine_id", "id"),
                      Index("ix_boot_evidence_delivery", "delivery", unique=True))


class Conductor(Base):
    """A live (or dead) conductor process and its heartbeat."""

    __tablename__ = "conductors"

    hostname: Mapped[str] = mapped_column(String(255), primary_key=True)
    started_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    heartbeat_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    online: Mapped[bool] = mapped_column(Boolean, default=True)


class Migration(Base):
    """A request to move a set of machines to another boot interface."""

    __tablename__ = "migrations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    target_boot_interface: Mapped[str] = mapped_column(String(64))
    selector: Mapped[dict] = mapped_column(JSON)
    options: Mapped[dict] = mapped_column(JSON)
    total: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text)
    # how it went for its machines, set when it finishes (migration_states.RESULTS)
    result: Mapped[str | None] = mapped_column(String(32))
    report: Mapped[dict | None] = mapped_column(JSON)  # dry-run results
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class MigrationMachine(Base):
    """One machine's progress through one migration (its state machine)."""

    __tablename__ = "migration_machines"

    migration_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("migrations.id", ondelete="CASCADE"), primary_key=True)
    machine_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    canary: Mapped[bool] = mapped_column(Boolean, default=False)
    source_boot_interface: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32), default=Step.QUEUED)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    activated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    deadline: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    evidence_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    owner: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    finished_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    updated_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)

    __table_args__ = (
        Index("ix_migration_machines_state", "migration_id", "state", "position"),
        Index("ix_migration_machines_machine", "machine_id"),
        # the scheduler's looks at machines awaiting boot, across migrations
        Index("ix_migration_machines_step_updated", "state", "updated_at"),
    )


class Setting(Base):
    """Deployment-wide values every process must share (the token secret)."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class AgentToken(Base):
    """A bearer token of a partition's boot agents: it reads that partition's
    boot data and delivers its evidence, nothing else. Only its SHA-256 is
    kept; the token is shown once, when it is made."""

    __tablename__ = "agent_tokens"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    partition_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("partitions.id", ondelete="CASCADE"), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
    # a rotated token stays valid until then, so that its agents can be given
    # the new one without a gap; None: valid until revoked
    expires_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    last_used_at: Mapped[datetime.datetime | None] = mapped_column(DateTime)


class BootChange(Base):
    """The change feed of partition boot data: a row for every change of what
    a partition's boot agents serve (a machine, its NICs, its migration step,
    the partition), written by triggers (schema revision 0009) whichever code
    made the change. ``machine_id`` None: the partition itself changed."""

    __tablename__ = "boot_changes"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    partition_id: Mapped[str] = mapped_column(String(128))
    machine_id: Mapped[str | None] = mapped_column(String(64))
    # PostgreSQL only, as events.xid and events.feed_id (metalboot_framework.feed)
    xid: Mapped[int | None] = mapped_column(BigInteger)
    feed_id: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_boot_changes_partition", "partition_id", "id"),
                      Index("ix_boot_changes_feed", "partition_id", "feed_id"))


class DhcpEntry(Base):
    """What the DHCP servers of a machine's partition answer its NICs for one
    boot interface (server-neutral host entries), as the interface's prepare
    step published them. The partition's boot agents apply them to their own
    dnsmasq and Kea; a change reaches them on the boot data feed (a trigger of
    schema revision 0010 writes its ``boot_changes`` row)."""

    __tablename__ = "dhcp_entries"

    machine_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("machines.id", ondelete="CASCADE"), primary_key=True)
    interface: Mapped[str] = mapped_column(String(64), primary_key=True)
    entries: Mapped[list] = mapped_column(JSON)
    updated_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)


class DhcpAgent(Base):
    """What a boot agent last said about the DHCP entries of its partition:
    the boot data cursor up to which its DHCP servers hold them, for which
    interfaces, and why it could not apply the next ones (``error``)."""

    __tablename__ = "dhcp_agents"

    partition_id: Mapped[str] = mapped_column(
        String(128), ForeignKey("partitions.id", ondelete="CASCADE"), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    interfaces: Mapped[list] = mapped_column(JSON)
    applied_cursor: Mapped[int] = mapped_column(BigInteger)
    entries: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    reported_at: Mapped[datetime.datetime] = mapped_column(DateTime, default=utcnow)
