"""The boot data of the agent's partitions, replicated from the API.

Each partition's data is loaded as a snapshot (``GET
/v1/partitions/{p}/boot-data``), then kept current by following its change
feed by cursor (a long poll); every change replaces whole records. What a
fetch reads is built from it on the event loop, where every change is applied
too (no locks): a :class:`~metalboot_framework.boot_server.cache.Snapshot` per
machine (machine and partition as plugins see them; no BMC address, no
password), the by-MAC index and the machines' tokens, which come with the
data (:class:`ReplicaTokens`: the agent holds no key that signs tokens).

The data of each partition is written to ``[agent] state_dir`` (atomically)
with the time the API last answered, so that an agent restarted while the API
is away serves it if it is younger than ``[agent] max_staleness``. Fresh means:
the API answered within ``max_staleness``; a partition that is not fresh is
not served (503, with the reason), and ``/healthz`` says so.
"""

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import threading
import time

from metalboot_framework import artifacts
from metalboot_framework.agent import state_files
from metalboot_framework.agent.client import ApiError, Gone
from metalboot_framework.boot_server.cache import Snapshot
from metalboot_framework.exceptions import Unavailable
from metalboot_framework.task import BmcInfo, MachineInfo, NicInfo, PartitionInfo
from metalboot_framework.tokens import same_token

LOG = logging.getLogger(__name__)

FEED_WAIT = 25  # seconds a long poll of the change feed waits for a change
SAVE_INTERVAL = 1.0  # seconds between two writes of a partition's data
CONTACT_SAVE_INTERVAL = 10.0  # seconds between two writes of the last contact alone
RETRY_MIN, RETRY_MAX = 0.2, 5.0  # seconds between tries while the API is away

_PARTITION_FIELDS = [f.name for f in dataclasses.fields(PartitionInfo)]


def machine_info(record):
    """A machine record of the boot data as plugins see a machine (no BMC)."""
    return MachineInfo(
        id=record["id"], partition_id=record["partition_id"], bmc=BmcInfo(None, None),
        nics=tuple(NicInfo(n["mac"], n.get("duid"), n.get("ipv4_address"),
                           n.get("ipv6_address")) for n in record.get("nics") or ()),
        boot_interface=record["boot_interface"], boot_mode=record["boot_mode"],
        state=record["state"], properties=dict(record.get("properties") or {}),
        token_generation=record["token_generation"],
        prepared_interface=record.get("prepared_interface"))


def partition_info(record):
    """The partition record of the boot data as plugins see a partition."""
    values = {name: record.get(name) for name in _PARTITION_FIELDS}
    values["cmdline"] = values["cmdline"] or ""
    values["properties"] = dict(values["properties"] or {})
    return PartitionInfo(**values)


class ReplicaTokens:
    """The machine tokens as :class:`~metalboot_framework.tokens.TokenSigner`
    answers, read from the replicated data: a machine's token for a
    generation other than the data's is no token (None)."""

    def __init__(self):
        self.by_machine = {}  # id -> (generation, {interface: (token, unbound token)})

    def _pair(self, machine_id, generation, interface):
        entry = self.by_machine.get(machine_id)
        if entry is None or entry[0] != generation:
            return None
        return entry[1].get(interface)

    def machine_token(self, machine_id, generation, interface):
        pair = self._pair(machine_id, generation, interface)
        return pair[0] if pair else None

    def unbound_token(self, machine_id, generation, interface):
        pair = self._pair(machine_id, generation, interface)
        return pair[1] if pair else None

    def verify(self, machine_id, generation, interface, token):
        expected = self.machine_token(machine_id, generation, interface)
        return bool(token) and bool(expected) and same_token(expected, token)

    def classify(self, machine_id, generation, interface, token, expected=None):
        """As TokenSigner.classify: True (own), False (unbound), None."""
        pair = self._pair(machine_id, generation, interface)
        if not token or not pair:
            return None
        if same_token(pair[0], token):
            return True
        if same_token(pair[1], token):
            return False
        return None


class _Lookup:
    """A mapping as the boot server reads its caches: ``cached`` and ``get``."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping):
        self._mapping = mapping

    def cached(self, key):
        return self._mapping.get(key)

    async def get(self, key):
        return self._mapping.get(key)


class PartitionData:
    """One partition as the agent holds it."""

    def __init__(self, partition_id):
        self.id = partition_id
        self.record = None  # the partition record (None: nothing loaded yet)
        self.info = None
        self.machines = {}  # id -> machine record
        self.interfaces = []
        self.cursor = None
        self.contact = None  # time.time() the API last answered (None: never)
        self.error = None  # why the API did not answer the last call
        self.source = None  # "api" or "disk"
        self.dirty = False
        self.saved_contact = None
        self.disk_note = None  # why the data on disk was not served, if it was not

    def age(self, now=None):
        return None if self.contact is None else max(0.0, (now or time.time()) - self.contact)

    def document(self):
        return {"partition_id": self.id, "partition": self.record, "cursor": self.cursor,
                "interfaces": self.interfaces, "machines": list(self.machines.values()),
                "contact": self.contact, "saved_at": time.time()}


class Replica:
    """The boot data of ``partitions``, served to
    :class:`~metalboot_framework.boot_server.app.BootServer` as its source."""

    def __init__(self, services, client, partitions, state_dir, max_staleness, reads=4):
        self.services = services
        self.client = client
        self.max_staleness = max_staleness
        self.directory = state_files.make_dir(os.path.join(state_dir, "partitions"))
        self.partitions = {p: PartitionData(p) for p in partitions}
        self.tokens = services.tokens  # a ReplicaTokens: the data's tokens
        self._snapshots = {}  # machine id -> Snapshot
        self._macs = {}  # (mac, interface) -> machine id
        self._mac_keys = {}  # machine id -> its keys in _macs
        self.snapshots = _Lookup(self._snapshots)
        self.macs = _Lookup(self._macs)
        self.partition_artifacts = None  # set by the agent (artifact_cache)
        self.reads = concurrent.futures.ThreadPoolExecutor(reads, "agent-reads")
        self._writes = concurrent.futures.ThreadPoolExecutor(1, "agent-state")
        self._tasks = []
        self.changes_applied = 0
        #: told of every load (``loaded(data)``) and change (``changed(data,
        #: machine_ids)``), started and stopped with the replica
        self.listeners = []

    # -- building what fetches read -------------------------------------------------
    def _put_machine(self, data, record):
        machine_id = record["id"]
        data.machines[machine_id] = record
        machine = machine_info(record)
        self._snapshots[machine_id] = Snapshot(machine, data.info, None)
        self.tokens.by_machine[machine_id] = (
            record["token_generation"],
            {iface: tuple(pair) for iface, pair in (record.get("tokens") or {}).items()})
        interfaces = {record["boot_interface"], *(record.get("booting_to") or ())}
        keys = {(artifacts.normalize_mac(nic.mac), iface)
                for nic in machine.nics for iface in interfaces}
        for key in keys:  # added before the stale ones go: no fetch misses meanwhile
            self._macs[key] = machine_id
        for key in self._mac_keys.get(machine_id, set()) - keys:
            if self._macs.get(key) == machine_id:
                del self._macs[key]
        self._mac_keys[machine_id] = keys

    def _drop_machine(self, data, machine_id):
        data.machines.pop(machine_id, None)
        snapshot = self._snapshots.get(machine_id)
        if snapshot is not None and snapshot.machine.partition_id == data.id:
            del self._snapshots[machine_id]
            self.tokens.by_machine.pop(machine_id, None)
            for key in self._mac_keys.pop(machine_id, ()):
                if self._macs.get(key) == machine_id:
                    del self._macs[key]

    def _set_partition(self, data, record):
        data.record = record
        data.info = partition_info(record)
        for machine_id, machine in data.machines.items():
            snapshot = self._snapshots.get(machine_id)
            if snapshot is not None:  # the same machine with the new partition
                self._snapshots[machine_id] = Snapshot(snapshot.machine, data.info, None)
            else:
                self._put_machine(data, machine)

    def load(self, data, document, source):
        """Replace the partition's data by a snapshot (of the API or the disk)."""
        for machine_id in list(data.machines):
            self._drop_machine(data, machine_id)
        data.interfaces = document.get("interfaces") or []
        data.cursor = None  # until the snapshot is in: a failed load is taken again
        data.machines = {}
        data.record, data.info = document["partition"], partition_info(document["partition"])
        for record in document["machines"]:
            self._put_machine(data, record)
        data.cursor = document["cursor"]
        data.source = source
        data.dirty = source == "api"
        for listener in self.listeners:
            listener.loaded(data)
        missing = set(data.interfaces) - set(self.services.interfaces.names())
        if missing and source == "api":
            LOG.warning("partition %s: boot interfaces %s are enabled in the control plane "
                        "but not on this agent: their fetches get 404", data.id,
                        ", ".join(sorted(missing)))

    def apply(self, data, changes):
        """Apply a page of the change feed."""
        if changes.get("partition") is not None:
            self._set_partition(data, changes["partition"])
        for record in changes.get("machines") or ():
            if record["partition_id"] == data.id:
                self._put_machine(data, record)
            else:
                self._drop_machine(data, record["id"])
        for machine_id in changes.get("removed") or ():
            self._drop_machine(data, machine_id)
        changed = changes.get("partition") is not None or changes.get("machines") or \
            changes.get("removed") or changes["cursor"] != data.cursor
        data.dirty = data.dirty or bool(changed)
        data.cursor = changes["cursor"]
        machine_ids = [r["id"] for r in changes.get("machines") or ()] + \
            list(changes.get("removed") or ())
        for listener in self.listeners:
            listener.changed(data, machine_ids)
        self.changes_applied += len(changes.get("machines") or ()) + \
            len(changes.get("removed") or ()) + (changes.get("partition") is not None)

    # -- what the boot server asks ----------------------------------------------------
    def unavailable(self, partition_id):
        """Why the partition's data (None: that of an unknown machine, which any
        partition not served might hold) is not to be served, or None."""
        if partition_id is not None:
            data = self.partitions.get(partition_id)
            return None if data is None else self._refusal(data)
        for data in self.partitions.values():
            reason = self._refusal(data)
            if reason is not None:
                return reason
        return None

    def _refusal(self, data):
        if data.record is None:
            return (f"the boot data of partition {data.id} is not loaded: the API has not "
                    f"answered since this agent started"
                    + (f", and {data.disk_note}" if data.disk_note else "")
                    + (f" ({data.error})" if data.error else ""))
        age = data.age()
        if age > self.max_staleness:
            return (f"the boot data of partition {data.id} is {age:.0f} s old, more than "
                    f"[agent] max_staleness ({self.max_staleness:g} s): the API last "
                    f"answered at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(data.contact))}"
                    + (f" ({data.error})" if data.error else ""))
        return None

    def authenticate_report(self, machine_id, token):
        """As :func:`metalboot_framework.artifacts.authenticate_report`, on the data."""
        snapshot = self._snapshots.get(machine_id)
        reason = self.unavailable(snapshot.partition.id if snapshot is not None else None)
        if reason is not None:
            raise Unavailable(reason)
        return artifacts.report_interfaces(
            self.services, self.tokens, snapshot.machine if snapshot is not None else None,
            token)

    def partition_of(self, machine_id):
        snapshot = self._snapshots.get(machine_id)
        return snapshot.partition.id if snapshot is not None else None

    def health(self):
        """(fresh, document) for /healthz."""
        now = time.time()
        reasons = [r for r in (self._refusal(d) for d in self.partitions.values()) if r]
        ages = [d.age(now) for d in self.partitions.values()]
        age = None if None in ages else max(ages)
        document = {"fresh": not reasons, "age": None if age is None else round(age, 3),
                    "partitions": [{"id": d.id, "fresh": self._refusal(d) is None,
                                    "age": None if d.age(now) is None else round(d.age(now), 3),
                                    "machines": len(d.machines), "cursor": d.cursor,
                                    "source": d.source, "error": d.error}
                                   for d in self.partitions.values()]}
        if reasons:
            document["reason"] = "; ".join(reasons)
        return not reasons, document

    # -- the disk ----------------------------------------------------------------------
    def _path(self, partition_id):
        return os.path.join(self.directory, f"{partition_id}.json")

    def load_from_disk(self):
        """At start: the data of each partition as last written, if it is
        younger than max_staleness."""
        for data in self.partitions.values():
            try:
                document = state_files.read_json(self._path(data.id))
                contact = state_files.read_json(self._path(data.id) + ".contact")
            except ValueError as exc:
                LOG.warning("cannot read the saved boot data of partition %s: %s",
                            data.id, exc)
                continue
            if document is None or document.get("partition") is None:
                continue
            data.contact = max(document.get("contact") or 0, (contact or {}).get("at") or 0)
            data.saved_contact = data.contact
            age = data.age()
            if age > self.max_staleness:
                data.disk_note = (f"the boot data on disk is {age:.0f} s old, more than "
                                  f"[agent] max_staleness ({self.max_staleness:g} s)")
                LOG.warning("partition %s: %s: not served until the API answers", data.id,
                            data.disk_note)
                data.contact = None
                continue
            try:
                self.load(data, document, "disk")
            except (KeyError, TypeError, ValueError) as exc:
                LOG.warning("cannot read the saved boot data of partition %s: %s: %s",
                            data.id, type(exc).__name__, exc)
                for machine_id in list(data.machines):
                    self._drop_machine(data, machine_id)
                data.record = data.info = data.contact = data.cursor = data.source = None
                continue
            LOG.info("partition %s: serving the boot data on disk (%d machines, %.0f s old) "
                     "until the API answers", data.id, len(data.machines), age)

    def _save(self, data):
        """Write the partition's data, or only the time of the last contact."""
        if data.dirty:
            data.dirty = False
            document = data.document()  # on the event loop: a consistent copy
            contact = data.contact
            return lambda: (state_files.write_json(self._path(data.id), document),
                            setattr(data, "saved_contact", contact))
        if data.contact is not None and (data.saved_contact is None or
                                         data.contact - data.saved_contact
                                         >= CONTACT_SAVE_INTERVAL):
            contact = data.contact
            return lambda: (state_files.write_json(self._path(data.id) + ".contact",
                                                   {"at": contact}),
                            setattr(data, "saved_contact", contact))
        return None

    async def _saving(self):
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SAVE_INTERVAL)
            await self._save_all(loop)

    async def _save_all(self, loop):
        for data in self.partitions.values():
            write = self._save(data)
            if write is None:
                continue
            try:
                await loop.run_in_executor(self._writes, write)
            except OSError as exc:
                data.dirty = True
                LOG.error("cannot write the boot data of partition %s to %s: %s",
                          data.id, self.directory, exc)

    # -- following the API --------------------------------------------------------------
    async def _follow(self, data):
        delay = RETRY_MIN
        wait = FEED_WAIT
        while True:
            try:
                if data.cursor is None:
                    document = await in_thread(self.client.boot_data, data.id)
                    self.load(data, document, "api")
                    LOG.info("partition %s: %d machines loaded from the API (cursor %s)",
                             data.id, len(data.machines), data.cursor)
                else:
                    changes = await in_thread(self.client.changes, data.id, data.cursor,
                                              wait)
                    self.apply(data, changes)
                    wait = 0 if changes.get("more") else FEED_WAIT
                    data.source = "api"
                data.contact = time.time()
                if data.error is not None:
                    LOG.info("partition %s: the API answers again", data.id)
                data.error = None
                delay = RETRY_MIN
            except Gone as exc:
                LOG.info("partition %s: the change feed no longer has cursor %s (%s): "
                         "loading a new snapshot", data.id, data.cursor, exc)
                data.cursor, data.source = None, None
            except Exception as exc:  # the follower must not end: the data would age
                if not isinstance(exc, ApiError):
                    LOG.exception("partition %s: cannot apply the API's answer", data.id)
                elif data.error is None:
                    LOG.warning("partition %s: cannot read the boot data from the API "
                                "(serving what this agent has until it answers): %s",
                                data.id, exc)
                data.error = str(exc) if isinstance(exc, ApiError) else \
                    f"unreadable answer: {type(exc).__name__}: {exc}"
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    # -- start and stop (the boot server calls them) ---------------------------------------
    def start(self):
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow(d)) for d in self.partitions.values()]
        self._tasks.append(loop.create_task(self._saving()))
        for listener in self.listeners:
            listener.start()

    async def stop(self):
        for listener in self.listeners:
            await listener.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self._save_all(asyncio.get_running_loop())

    def shutdown(self):
        self.reads.shutdown(wait=True)
        self._writes.shutdown(wait=True)


def in_thread(function, *args):
    """``function(*args)`` in a daemon thread of its own, as a future of the
    running loop: a long poll in progress (up to FEED_WAIT seconds) must not
    hold up the process's exit, as a pool's thread, joined at exit, would."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, exc):
        if not future.done():
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def run():
        try:
            result, exc = function(*args), None
        except BaseException as caught:  # handed to the awaiting coroutine
            result, exc = None, caught
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, daemon=True, name=f"agent-{function.__name__}").start()
    return future
