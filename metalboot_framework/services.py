"""The objects the API and the conductor share, built once per process."""

import contextlib
import logging
import os
import secrets
import types

import jinja2
import sqlalchemy

from metalboot_framework import hooks as hooks_mod
from metalboot_framework import ipxe
from metalboot_framework import loader
from metalboot_framework.address_binding import AddressBinding
from metalboot_framework.announcer import Announcer
from metalboot_framework.exceptions import NotFound
from metalboot_framework.inventory import iso
from metalboot_framework.store import db as db_mod
from metalboot_framework.store import driver_insert
from metalboot_framework.store.group_commit import Batched, GroupCommitter
from metalboot_framework.store import models, password_key
from metalboot_framework.store.packed_rows import all_rows
from metalboot_framework.steploop import StepLoop
from metalboot_framework.task import BmcInfo, BootTask, MachineInfo, NicInfo, PartitionInfo
from metalboot_framework.tokens import TokenSigner

LOG = logging.getLogger(__name__)

TEMPLATE_DIR = os.path.join(os.path.dirname(__file__), "templates")


EVENTS = models.Event.__table__
_EVENT_INSERT = EVENTS.insert().returning(EVENTS.c.id)
_EVENTS_INSERT_MANY = EVENTS.insert().returning(EVENTS.c.id, sort_by_parameter_order=True)
_EVENT_COLUMNS = ("id", "kind", "message", "machine_id", "migration_id", "data", "created_at")
_NEWEST_EVENT_ID = sqlalchemy.select(sqlalchemy.func.max(EVENTS.c.id))
_M, _N, _P = models.Machine.__table__, models.Nic.__table__, models.Partition.__table__
_IDS = sqlalchemy.bindparam("ids", expanding=True)
# What machine_info() reads, no more: each further column is a conversion per row
# (timestamps, the drift list), and a batch reads hundreds of machines.
_MACHINES_BY_IDS = sqlalchemy.select(*(_M.c[name] for name in (
    "id", "partition_id", "bmc_address", "bmc_username", "bmc_password", "bmc_verify_tls",
    "boot_interface", "boot_mode", "state", "properties", "token_generation",
    "prepared_interface"))).where(_M.c.id.in_(_IDS))
# Their partitions, each read once however many of its machines are in the batch.
_PARTITIONS_BY_IDS = sqlalchemy.select(_P).where(_P.c.id.in_(_IDS))
_NICS_BY_MACHINES = sqlalchemy.select(_N).where(_N.c.machine_id.in_(_IDS)) \
    .order_by(_N.c.machine_id, _N.c.position)


class UnitOfWork:
    """A write transaction, the events it appends (for hooks, after commit) and
    what is to be announced once it is committed (:meth:`announce`)."""

    def __init__(self, session, defer_events=False):
        self.session = session
        self.events = []
        self.defer_events = defer_events  # inserted by insert_events(), ids then
        self.after = []  # (fn, args) to call once committed

    def announce(self, fn, *args):
        """Call ``fn(*args)`` once this unit is committed: for a group-committed
        unit in the announcer's thread, in commit order (:mod:`..announcer`)."""
        self.after.append((fn, args))

    def event(self, kind, message, machine_id=None, migration_id=None, data=None):
        # A plain INSERT ... RETURNING: the ORM's flush costs more than the write.
        row = {"kind": kind, "message": message, "machine_id": machine_id,
               "migration_id": migration_id, "data": data, "created_at": models.utcnow()}
        row["id"] = None if self.defer_events else \
            self.session.execute(_EVENT_INSERT, row).scalar_one()
        ev = types.SimpleNamespace(**row)
        self.events.append(ev)
        return ev


def insert_events(conn, units):
    """The deferred events of ``units``, in order, with one multi-row INSERT."""
    pending = [ev for unit in units for ev in unit.events if ev.id is None]
    if pending and conn.dialect.name == "sqlite":
        _insert_events_sqlite(conn, pending)
    elif pending:
        ids = conn.execute(_EVENTS_INSERT_MANY, [
            {k: v for k, v in vars(ev).items() if k != "id"} for ev in pending]).scalars()
        for ev, event_id in zip(pending, ids, strict=True):
            ev.id = event_id


def _insert_events_sqlite(conn, pending):
    """SQLite: ids from here on the newest, and multi-row INSERTs through the
    driver (:func:`driver_insert.insert_rows`: not an executemany, which steps
    once per row).

    SQLAlchemy can only return SQLite's ids in the rows' order by inserting them
    one statement at a time (most of a step's cost to the group commit). Every
    write transaction on SQLite holds the database's write lock from BEGIN
    IMMEDIATE on (store/db.py), so the ids after the newest are this
    transaction's to give, as SQLite would give them. Values go through the
    columns' own bind processors, so the rows are those SQLAlchemy would write.
    """
    sql, binders = driver_insert.statement(EVENTS, _EVENT_COLUMNS, conn.dialect)
    first = (conn.execute(_NEWEST_EVENT_ID).scalar() or 0) + 1
    rows = []
    for n, ev in enumerate(pending):
        ev.id = first + n
        rows.append(tuple(bind(getattr(ev, name)) if bind else getattr(ev, name)
                          for name, bind in binders))
    driver_insert.insert_rows(conn, sql, rows)


def event_dict(ev):
    """An event as GET /v1/events shows it and as hooks receive it."""
    return {"id": ev.id, "kind": ev.kind, "message": ev.message,
            "machine_id": ev.machine_id, "migration_id": ev.migration_id,
            "data": ev.data, "created_at": iso(ev.created_at)}


class Services:
    def __init__(self, conf, db, interfaces, hooks, tokens, password_key):
        self.conf = conf
        self.db = db
        self.interfaces = interfaces
        self.hooks = hooks
        self.tokens = tokens
        # Seals BMC passwords before they are stored, opens them when read.
        self.password_key = password_key
        # Whether a fetch by MAC came from an address its machine can have.
        self.address_binding = AddressBinding(conf)
        # Hooks and log lines of group-committed changes, in commit order.
        self.announcer = Announcer()
        # One writer thread commits many threads' small transactions together.
        self._group = GroupCommitter(db.write_conn, finish=lambda conn, done: insert_events(
            conn, [unit for unit, _ in done]), committed=self._announce_committed)
        # Coroutine plugin steps and the conductor's machines (started when first used).
        self.step_loop = StepLoop()
        # Called when the API made work for a conductor (a migration created or
        # resumed, a machine to enrol or remove): a conductor in this process
        # looks at once, not at its next poll.
        self.work_watchers = []
        loaders = [jinja2.FileSystemLoader(TEMPLATE_DIR)]
        if conf.artifacts.template_dir:
            loaders.insert(0, jinja2.FileSystemLoader(conf.artifacts.template_dir))
        self.templates = ipxe.script_environment(jinja2.ChoiceLoader(loaders))

    @classmethod
    def from_conf(cls, conf, upgrade=None):
        """Load plugins and hooks, open the database, upgrade its schema."""
        interfaces = loader.BootInterfaces(conf.enabled_boot_interfaces,
                                           conf.default_boot_interface)
        hooks = hooks_mod.Hooks(hooks_mod.make_plugin_manager(conf.disabled_hooks))
        db = db_mod.Database(conf.database.connection, pool_size=conf.database.pool_size)
        key = password_key.load(conf.database.bmc_password_key_file, db)
        if conf.database.auto_upgrade if upgrade is None else upgrade:
            db.upgrade(password_key=key)
        password_key.check(key, db)
        tokens = TokenSigner.from_database(db)
        return cls(conf, db, interfaces, hooks, tokens, key)

    # -- tokens for the API -------------------------------------------------
    def api_tokens(self):
        """(admin tokens, reader tokens); generates an admin token if none is set."""
        admin = [t for t in self.conf.api.admin_tokens if t]
        reader = [t for t in self.conf.api.reader_tokens if t]
        if not admin and not reader:
            admin = [self.generated_admin_token()]
        return admin, reader

    def generated_admin_token(self):
        path = os.path.join(self.conf.state_path, "admin-token")
        os.makedirs(self.conf.state_path, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
            LOG.warning("no API tokens configured: generated an admin token in %s", path)
        with open(path) as f:
            return f.read().strip()

    # -- transactions ---------------------------------------------------------
    @contextlib.contextmanager
    def write(self, core=False):
        """A write transaction; events added to it reach hooks after commit.

        ``core``: over a plain connection instead of an ORM session (hot paths);
        its events are inserted together at the end, ids then.
        """
        with (self.db.write_conn() if core else self.db.write()) as session:
            unit = UnitOfWork(session, defer_events=core)
            yield unit
            if core:
                insert_events(session, [unit])
        for fn, args in self._after_commit(unit):
            fn(*args)

    def _after_commit(self, unit, event_hooks=None):
        """What follows the commit of ``unit``: its events to the event hooks,
        then its announcements. ``event_hooks``: whether there are any, if the
        caller asked already (once for a batch of units)."""
        calls = []
        if event_hooks is None:
            event_hooks = self.hooks.has("metalboot_event")
        if unit.events and event_hooks:
            calls += [(self._notify_event, (ev,)) for ev in unit.events]
        return calls + unit.after

    def work_arrived(self):
        for watcher in self.work_watchers:
            watcher()

    def _notify_event(self, ev):
        self.hooks.notify("metalboot_event", event=event_dict(ev))

    def _announce_committed(self, results):
        """In the writer thread, after each group commit: its units' events and
        announcements to the announcer, in commit order."""
        event_hooks = self.hooks.has("metalboot_event")
        self.announcer.put([call for unit, _ in results
                            for call in self._after_commit(unit, event_hooks)])

    @staticmethod
    def _grouped(work):
        def run(conn):
            unit = UnitOfWork(conn, defer_events=True)
            return unit, work(unit)
        return run

    def write_grouped(self, work):
        """``work(unit)`` like ``write(core=True)``, group-committed with other
        threads' writes; returns its result once committed. ``work`` must only
        write to the database: it may run twice (a failed batch is re-run one by
        one). Its events get their ids at the end of the batch; they reach the
        hooks, with what the unit announces, through the announcer."""
        return self._group.run(self._grouped(work))[1]

    def write_batched(self, many, item):
        """Like :meth:`write_grouped`, for work that is cheaper done for many items
        at once: ``many(conn, items)`` writes for every item of a batch that shares
        ``many`` and returns ``(UnitOfWork, result)`` per item, in order."""
        return self._group.run(Batched(many, item))[1]

    def write_batched_later(self, many, item):
        """:meth:`write_batched` without waiting: an outcome that :meth:`asettle`
        turns into its result."""
        return self._group.submit(Batched(many, item))

    # Coroutines of the step loop wait for the same commits without a thread.
    async def awrite_grouped(self, work):
        """:meth:`write_grouped` for a coroutine on the step loop."""
        return (await self.step_loop.outcome(self._group.submit(self._grouped(work))))[1]

    async def awrite_batched(self, many, item):
        """:meth:`write_batched` for a coroutine on the step loop."""
        return (await self.step_loop.outcome(self._group.submit(Batched(many, item))))[1]

    async def asettle(self, outcome):
        """The result of :meth:`write_batched_later`'s work, once committed."""
        return (await self.step_loop.outcome(outcome))[1]

    def record_event(self, machine_id, kind, message, data=None, migration_id=None):
        self.write_grouped(self._event_work(machine_id, kind, message, data, migration_id))

    async def arecord_event(self, machine_id, kind, message, data=None, migration_id=None):
        await self.awrite_grouped(self._event_work(machine_id, kind, message, data,
                                                   migration_id))

    @staticmethod
    def _event_work(machine_id, kind, message, data, migration_id):
        return lambda unit: unit.event(kind, message, machine_id=machine_id,
                                       migration_id=migration_id, data=data)

    # -- URLs and scripts -----------------------------------------------------
    @property
    def public_url(self):
        if self.conf.api.public_url:
            return self.conf.api.public_url.rstrip("/")
        host = self.conf.api.host_ip
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.conf.api.port}"

    def artifact_url(self, machine_id, interface, token, name):
        return f"{self.public_url}/boot/{machine_id}/{interface}/{token}/{name}"

    def partition_artifact_url(self, partition_id, interface, name):
        return f"{self.public_url}/boot/partitions/{partition_id}/{interface}/{name}"

    def mac_boot_script_url(self, interface, mac_variable="${net0/mac}"):
        """URL of boot.ipxe looked up by MAC, for scripts shared by a partition.

        ``mac_variable`` is left for iPXE to expand. The server answers only for
        a machine whose boot interface, or active migration's target, is
        ``interface``; the fetch counts as evidence like the per-machine URL
        when it comes from an address bound to the machine
        (:mod:`metalboot_framework.address_binding`), else it is unverified.
        """
        return f"{self.public_url}/boot/mac/{mac_variable}/{interface}/boot.ipxe"

    def report_url(self, machine_id):
        return f"{self.public_url}/v1/machines/{machine_id}/boot-report"

    def render_boot_script(self, machine, partition, interface, token):
        template = self.templates.get_template(self.conf.artifacts.boot_script_template)
        script = template.render(machine=machine, partition=partition, interface=interface,
                                 token=token, report_url=self.report_url(machine.id),
                                 public_url=self.public_url)
        if not self.hooks.has("metalboot_amend_boot_script"):
            return script
        return self.hooks.amend_boot_script(script, machine=machine, partition=partition,
                                            interface=interface)

    # -- snapshots and tasks -----------------------------------------------------
    def snapshot(self, conn, machine_id):
        """The machine and its partition as a plugin sees them (session or connection)."""
        found = self.snapshots(conn, [machine_id]).get(machine_id)
        if found is None:
            raise NotFound(f"machine {machine_id} not found")
        return found

    def snapshots(self, conn, machine_ids):
        """{machine id: (machine, partition)} for many machines in three queries
        (each machine gets a PartitionInfo of its own: plugins may not share one)."""
        found = {}
        partitions = {}  # id -> row
        for start in range(0, len(machine_ids), 500):
            ids = list(machine_ids[start:start + 500])
            nics = {}
            for nic in sorted(all_rows(conn, _NICS_BY_MACHINES, {"ids": ids}),
                              key=lambda nic: (nic.machine_id, nic.position)):
                nics.setdefault(nic.machine_id, []).append(nic)
            machines = all_rows(conn, _MACHINES_BY_IDS, {"ids": ids})
            wanted = list({m.partition_id for m in machines} - partitions.keys())
            if wanted:
                partitions.update((p.id, p) for p in all_rows(
                    conn, _PARTITIONS_BY_IDS, {"ids": wanted}))
            for machine in machines:
                partition = partitions.get(machine.partition_id)
                if partition is not None:
                    found[machine.id] = (machine_info(machine, nics.get(machine.id, ()),
                                                    self.password_key),
                                         partition_info(partition))
        return found

    def task(self, machine_id, interface, migration_id=None):
        with self.db.read_conn() as conn:
            machine, partition = self.snapshot(conn, machine_id)
        return BootTask(self, machine, partition, interface, migration_id=migration_id)


def machine_info(machine, nics, password_key):
    """A machine row as plugins see it; ``password_key`` opens its BMC
    password when a plugin reads it."""
    # A column read here must be in the revision triggers' list too
    # (store/migrations/versions/0006), or the boot server will not see it change.
    return MachineInfo(
        id=machine.id, partition_id=machine.partition_id,
        bmc=BmcInfo.sealed(machine.bmc_address, machine.bmc_username, machine.bmc_password,
                           machine.bmc_verify_tls, password_key),
        nics=tuple(NicInfo(n.mac, n.duid, n.ipv4_address, n.ipv6_address) for n in nics),
        boot_interface=machine.boot_interface, boot_mode=machine.boot_mode,
        state=machine.state, properties=dict(machine.properties or {}),
        token_generation=machine.token_generation,
        prepared_interface=machine.prepared_interface)


def partition_info(p):
    # As for machine_info: a column read here must be in the revision triggers' list.
    return PartitionInfo(id=p.id, kernel_url=p.kernel_url, initrd_url=p.initrd_url,
                         cmdline=p.cmdline or "", metal_boot_url=p.metal_boot_url,
                         metal_hammer_version=p.metal_hammer_version,
                         properties=dict(p.properties or {}))
