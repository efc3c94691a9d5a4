"""The agent's DHCP servers hold its partitions' DHCP entries.

The boot data of each machine carries the host entries its boot interfaces
published (``dhcp``: interface -> entries). For every interface with a DHCP
backend in this agent's configuration (:meth:`BootInterface.dhcp_backends`:
``[pxe] dhcp_backend``, ``[dhcp_httpboot] ipv6_backend`` and ``ipv4_backend``)
the agent writes them to its own dnsmasq and Kea through those backends, and
reports to the API the boot data cursor up to which its servers hold them
(``POST .../boot-data/dhcp``, also every :data:`REPORT_INTERVAL` seconds as
a sign of life): the prepare step of a machine waits for that.

After a snapshot (at start, from the disk or the API, or after the feed's
410) the servers are brought to the data as a whole: entries of machines the
data no longer holds are removed (once every partition of the agent is
loaded: an entry of a machine in none of them), the others written. A backend
owns only what it wrote, so the operator's own subnets, pools and options are
never touched. Backends block (files, Kea's socket): they run in one thread
of their own, one change at a time.
"""

import asyncio
import concurrent.futures
import logging

from metalboot_framework.agent.client import ApiError, Gone
from metalboot_framework.dhcp import HostEntry

LOG = logging.getLogger(__name__)

#: seconds between two reports when nothing changed
REPORT_INTERVAL = 5.0
RETRY_MIN, RETRY_MAX = 0.5, 10.0  # seconds before a failed apply is tried again


def configured_backends(services):
    """{interface: [backend]} of the enabled interfaces that publish DHCP
    entries and have a backend here (ValidationFailed for one that cannot load)."""
    found = {}
    for name in services.interfaces.names():
        backends = services.interfaces.get(name).dhcp_backends(services.conf)
        if backends:
            found[name] = list(backends.values())
    return found


def wanted(record, interfaces):
    """{interface: entry dicts} a machine record of the boot data asks of the
    DHCP servers for ``interfaces``; None for a machine that is gone."""
    if record is None:
        return None
    dhcp = record.get("dhcp") or {}
    return {iface: dhcp[iface] for iface in interfaces if dhcp.get(iface)}


class _Partition:
    def __init__(self):
        self.full = False  # a snapshot was loaded: bring the servers to it as a whole
        self.dirty = set()  # machine ids changed since the last apply
        self.cursor = None  # the data's cursor the servers hold (None: nothing yet)
        self.entries = 0
        self.error = None
        self.orphans_pending = False  # loaded before all partitions were: look again
        self.wake = asyncio.Event()


class DhcpApplier:
    """Writes machines' entries to the backends, remembering what it wrote;
    one thread at a time."""

    def __init__(self, backends):
        self.backends = backends  # {interface: [backend]}
        self._applied = {}  # (machine, interface) -> entries held
        self._owner = {}  # machine -> partition

    def apply(self, partition_id, full, desired, others):
        """In the DHCP thread: make the servers hold ``desired`` ({machine:
        {interface: entry dicts} or None: gone}); with ``full`` it is the
        partition's whole data. Each backend gets all its changes in one call
        (Kea: one reload). Returns the number of machines with entries."""
        plan = _Plan()
        if full:
            self._reconcile(partition_id, desired, others, plan)
        for machine_id, wanted in sorted(desired.items()):
            self._plan_machine(machine_id, wanted, plan)
        for backend, items in plan.by_backend.values():
            backend.apply_host_entries(items)
        for key, entries in plan.done:
            if entries is None:
                self._applied.pop(key, None)
            else:
                self._applied[key] = entries
        for machine_id in {key[0] for key, _ in plan.done} | set(desired):
            if any((machine_id, i) in self._applied for i in self.backends):
                self._owner[machine_id] = partition_id
            else:
                self._owner.pop(machine_id, None)
        return sum(1 for owner in self._owner.values() if owner == partition_id)

    def _reconcile(self, partition_id, desired, others, plan):
        owned = set()
        for backends in self.backends.values():
            for backend in backends:
                for entry in backend.list_host_entries():
                    owned.add((entry.machine_id, entry.interface))
        for machine_id, interface in sorted(owned):
            if machine_id in desired or interface not in self.backends:
                continue
            if others is None or machine_id in others:
                continue  # another partition's, or it may be
            LOG.info("DHCP: removing the entries of machine %s (%s): not in the boot data of "
                     "partition %s any more", machine_id, interface, partition_id)
            plan.remove(self.backends[interface], machine_id, interface)
        for key in owned:
            if key[0] in desired:
                self._applied[key] = None  # held, content unknown: written again

    def _plan_machine(self, machine_id, wanted, plan):
        for interface, backends in self.backends.items():
            entries = (wanted or {}).get(interface)
            key = (machine_id, interface)
            if entries:
                if self._applied.get(key) != entries:
                    plan.ensure(backends, machine_id, interface, entries)
            elif key in self._applied:
                plan.remove(backends, machine_id, interface)


class _Plan:
    """The changes of one apply, by backend, and what is held after them."""

    def __init__(self):
        self.by_backend = {}  # id(backend) -> (backend, [(machine, interface, entries)])
        self.done = []  # ((machine, interface), entry dicts or None)

    def _add(self, backends, item):
        for backend in backends:
            self.by_backend.setdefault(id(backend), (backend, []))[1].append(item)

    def ensure(self, backends, machine_id, interface, entries):
        self._add(backends, (machine_id, interface,
                             [HostEntry.from_dict(e) for e in entries]))
        self.done.append(((machine_id, interface), entries))

    def remove(self, backends, machine_id, interface):
        self._add(backends, (machine_id, interface, None))
        self.done.append(((machine_id, interface), None))


class DhcpSync:
    """Applies the DHCP entries of the replica's partitions to ``backends``."""

    def __init__(self, replica, client, agent_id, backends):
        self.replica = replica
        self.client = client
        self.agent_id = agent_id
        self.backends = backends  # {interface: [backend]}
        self.partitions = {}
        self.applier = DhcpApplier(backends)
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "agent-dhcp")
        self._tasks = []
        replica.listeners.append(self)

    @property
    def interfaces(self):
        return sorted(self.backends)

    # -- what the replica tells (on the event loop) -----------------------------------
    def _state(self, partition_id):
        state = self.partitions.get(partition_id)
        if state is None:
            state = self.partitions[partition_id] = _Partition()
        return state

    def loaded(self, data):
        state = self._state(data.id)
        state.full, state.dirty = True, set()
        state.wake.set()
        for other in self.partitions.values():
            if other.orphans_pending:
                other.full, other.orphans_pending = True, False
                other.wake.set()

    def changed(self, data, machine_ids):
        state = self._state(data.id)
        state.dirty.update(machine_ids)
        state.wake.set()

    # -- applying ----------------------------------------------------------------------
    def _desired(self, data, machine_ids):
        return {mid: wanted(data.machines.get(mid), self.backends) for mid in machine_ids}

    def _others_loaded(self, partition_id):
        """Machine ids of the agent's other partitions, or None if one is not loaded."""
        others = set()
        for data in self.replica.partitions.values():
            if data.id == partition_id:
                continue
            if data.record is None:
                return None
            others.update(data.machines)
        return others

    async def _run(self, partition_id):
        loop = asyncio.get_running_loop()
        state = self._state(partition_id)
        data = self.replica.partitions[partition_id]
        delay = RETRY_MIN
        while True:
            try:
                await asyncio.wait_for(state.wake.wait(), REPORT_INTERVAL)
            except asyncio.TimeoutError:
                pass
            state.wake.clear()
            if data.cursor is not None and (state.full or state.dirty):
                full, dirty, cursor = state.full, state.dirty, data.cursor
                desired = self._desired(data, data.machines if full else dirty)
                others = self._others_loaded(partition_id) if full else set()
                state.full, state.dirty = False, set()
                try:
                    state.entries = await loop.run_in_executor(
                        self._thread, self.applier.apply, partition_id, full, desired, others)
                except Exception as exc:  # reported; tried again, with what came since
                    state.full, state.dirty = state.full or full, state.dirty | set(dirty)
                    message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                    if state.error != message:
                        LOG.error("DHCP: cannot apply the entries of partition %s: %s",
                                  partition_id, message)
                    state.error = message
                    await self._report(partition_id, state)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
                    state.wake.set()
                    continue
                if full and others is None:
                    state.orphans_pending = True  # removed once all partitions are in
                if state.error is not None:
                    LOG.info("DHCP: the entries of partition %s are applied again", partition_id)
                state.cursor, state.error, delay = cursor, None, RETRY_MIN
            await self._report(partition_id, state)

    async def _report(self, partition_id, state):
        if state.cursor is None and state.error is None:
            return
        body = {"agent": self.agent_id, "cursor": state.cursor or 0,
                "interfaces": self.interfaces, "entries": state.entries, "error": state.error}
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.client.dhcp_report, partition_id, body)
        except Gone:
            pass  # the replica takes a new snapshot, then the servers follow it
        except ApiError as exc:
            LOG.debug("DHCP: cannot report to the API: %s", exc)

    # -- start and stop (with the replica) -------------------------------------------------
    def start(self):
        loop = asyncio.get_running_loop()
        for partition_id in self.replica.partitions:
            state = self._state(partition_id)
            if self.replica.partitions[partition_id].record is not None:
                state.full = True  # loaded from the disk before the loop ran
                state.wake.set()
        self._tasks = [loop.create_task(self._run(p)) for p in self.replica.partitions]

    async def stop(self):
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._thread.shutdown(wait=True)

    def status(self):
        """For /healthz: per partition, the cursor its DHCP servers hold."""
        return {p: {"cursor": s.cursor, "entries": s.entries, "error": s.error}
                for p, s in self.partitions.items()}
