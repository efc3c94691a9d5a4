"""What a boot interface sees of one machine: a read-only snapshot and services.

Plugins get a :class:`BootTask`, never a database object, so that a plugin call
that takes minutes (a BMC reset) holds no database session and cannot write
to the machine record behind the conductor's back.
"""

import asyncio
import dataclasses
from typing import Any, Mapping, Optional, Sequence

from sqlalchemy import select

from metalboot_framework import partition_dhcp
from metalboot_framework.store import models


class BmcInfo:
    """How to reach the machine's BMC.

    The database keeps the password sealed
    (:mod:`metalboot_framework.store.password_key`); a snapshot read from it
    opens the password only when :attr:`password` is first read, so that the
    boot server, which reads many machines and no password, opens none.
    """

    __slots__ = ("address", "username", "verify_tls", "_password", "_sealed", "_key")

    def __init__(self, address: Optional[str], username: Optional[str],
                 password: Optional[str] = None, verify_tls: bool = True):
        self.address, self.username, self.verify_tls = address, username, verify_tls
        self._password, self._sealed, self._key = password, None, None

    @classmethod
    def sealed(cls, address, username, sealed, verify_tls, key):
        """A BmcInfo whose password ``key`` opens from ``sealed`` when read."""
        info = cls(address, username, None, verify_tls)
        info._sealed, info._key = sealed, key
        return info

    @property
    def password(self) -> Optional[str]:
        if self._sealed is not None:
            self._password, self._sealed = self._key.open(self._sealed), None
        return self._password

    def __setattr__(self, name, value):
        if name in ("address", "username", "verify_tls") and hasattr(self, name):
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __eq__(self, other):
        if not isinstance(other, BmcInfo):
            return NotImplemented
        if (self.address, self.username, self.verify_tls) != \
                (other.address, other.username, other.verify_tls):
            return False
        # the same stored token is the same password, without opening it
        return (self._sealed is not None and self._sealed == other._sealed) \
            or self.password == other.password

    def __hash__(self):
        return hash((self.address, self.username, self.verify_tls))

    def __repr__(self):  # never the password
        return (f"BmcInfo(address={self.address!r}, username={self.username!r}, "
                f"verify_tls={self.verify_tls!r})")


@dataclasses.dataclass(frozen=True)
class NicInfo:
    mac: str
    duid: Optional[str] = None
    ipv4_address: Optional[str] = None
    ipv6_address: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MachineInfo:
    id: str
    partition_id: str
    bmc: BmcInfo
    nics: Sequence[NicInfo]
    boot_interface: str
    boot_mode: str
    state: str
    properties: Mapping[str, Any]
    token_generation: int
    #: The interface the machine was last prepared for (None: never).
    prepared_interface: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    id: str
    kernel_url: Optional[str]
    initrd_url: Optional[str]
    cmdline: str
    metal_boot_url: Optional[str]
    metal_hammer_version: Optional[str]
    properties: Mapping[str, Any]
    #: Where the partition's machines fetch what they boot (its boot agents);
    #: None: the API's ``[api] public_url``.
    boot_url: Optional[str] = None


class BootTask:
    """One machine, one boot interface, and the services a plugin may use."""

    def __init__(self, services, machine: Optional[MachineInfo], partition: Optional[
            PartitionInfo], interface: str, migration_id: Optional[str] = None,
            machine_id: Optional[str] = None):
        self.services = services
        self._machine = machine
        self._partition = partition
        self.machine_id = machine.id if machine is not None else machine_id
        self.interface = interface
        self.migration_id = migration_id

    @classmethod
    def lazy(cls, services, machine_id, interface, migration_id=None):
        """A task that reads the machine only when a plugin looks at it."""
        return cls(services, None, None, interface, migration_id, machine_id=machine_id)

    def _load(self):
        with self.services.db.read_conn() as conn:
            self._machine, self._partition = self.services.snapshot(conn, self.machine_id)

    @property
    def machine(self) -> MachineInfo:
        if self._machine is None:
            self._load()
        return self._machine

    @property
    def partition(self) -> PartitionInfo:
        if self._partition is None:
            self._load()
        return self._partition

    @property
    def conf(self):
        return self.services.conf

    @property
    def token(self):
        """The machine's current token for the task's interface."""
        return self.token_for(self.interface)

    def token_for(self, interface):
        """The machine's current token for ``interface`` (tokens are bound to one)."""
        return self.services.tokens.machine_token(
            self.machine.id, self.machine.token_generation, interface)

    def artifact_url(self, name, interface=None):
        """The URL of artifact ``name`` unique to this machine and interface.

        A fetch of it is recorded as boot evidence for ``interface`` (default:
        the task's interface).
        """
        interface = interface or self.interface
        return self.services.artifact_url(self.machine.id, interface,
                                          self.token_for(interface), name,
                                          partition=self.partition)

    def boot_script(self):
        """The machine's boot.ipxe as it would be served for this interface."""
        return self.services.render_boot_script(self.machine, self.partition,
                                                self.interface, self.token)

    def event_kind(self, kind):
        """The kind under which an event of the plugin is recorded:
        ``<interface>.<what>``, named after the entry point the plugin was
        loaded as. One class loaded as ``fake`` and ``fake-alt`` records
        ``fake-alt.activate`` for the latter, whatever prefix it wrote
        (``"activate"``, ``"fake.activate"``): an operator reading the history
        sees which of the two acted."""
        return f"{self.interface}.{kind.split('.', 1)[-1]}"

    def record_event(self, kind, message, **data):
        """Append an event to the machine's history (committed at once), as
        :meth:`event_kind` names it; its data carry ``interface``."""
        self.services.transactions.grouped(self._event(kind, message, data)).result()

    def last_event(self, *kinds):
        """``(kind, data)`` of the machine's newest event of one of ``kinds``
        (named as :meth:`event_kind` names them), or None: what a step of the
        plugin recorded for a later one (prepare for clean_up, say)."""
        names = [self.event_kind(kind) for kind in kinds]
        with self.services.db.read() as session:
            row = session.execute(
                select(models.Event.kind, models.Event.data).where(
                    models.Event.machine_id == self.machine.id, models.Event.kind.in_(names))
                .order_by(models.Event.id.desc()).limit(1)).first()
        return None if row is None else (row.kind, row.data or {})

    async def arecord_event(self, kind, message, **data):
        """:meth:`record_event` for a step written as a coroutine: waits for the
        commit without blocking the loop."""
        await self.services.transactions.grouped(self._event(kind, message, data))

    def _event(self, kind, message, data):
        """The group-committed work of :meth:`record_event` (its values taken now,
        not in the writer's thread)."""
        kind, data = self.event_kind(kind), dict(data, interface=self.interface)
        machine_id, migration_id = self.machine.id, self.migration_id
        return lambda unit: unit.event(kind, message, machine_id=machine_id,
                                       migration_id=migration_id, data=data)

    async def apublish_dhcp_entries(self, entries):
        """Make ``entries`` (:class:`~metalboot_framework.dhcp.HostEntry`, one
        per NIC) what the DHCP servers of the machine's partition answer it for
        the task's interface, and wait until every boot agent of the partition
        has applied them to its DHCP servers. Returns the agents' ids; raises
        :class:`~metalboot_framework.exceptions.BootInterfaceError` naming the
        agents that did not apply them within ``[dhcp] apply_timeout``."""
        position = await asyncio.to_thread(partition_dhcp.publish, self.services,
                                           self.machine.id, self.interface, list(entries))
        return await partition_dhcp.wait_applied(self.services, self.machine.id,
                                                 self.partition.id, self.interface, position)

    async def awithdraw_dhcp_entries(self):
        """Remove the machine's DHCP entries of the task's interface and wait
        until the partition's boot agents have removed them from their DHCP
        servers (as :meth:`apublish_dhcp_entries` waits)."""
        position = await asyncio.to_thread(partition_dhcp.withdraw, self.services,
                                           self.machine.id, self.interface)
        return await partition_dhcp.wait_applied(self.services, self.machine.id,
                                                 self.partition.id, self.interface, position,
                                                 action="removed")
