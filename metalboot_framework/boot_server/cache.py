"""What a fetch reads, kept between fetches: machine snapshots (with their
rendered boot.ipxe), MAC lookups and partition artifacts.

Each is cached for ``[boot_server] cache_ttl`` seconds, and concurrent misses
are loaded by one query (:class:`BatchCache`). An expired machine is not read
again unless it changed: one narrow query for the revisions of all expired
machines (bumped by database triggers on any write of what a snapshot holds)
tells which to read; the others keep their snapshot and rendered boot.ipxe. In
a storm most machines do not change, so most fetches cost no read of the
machine at all. The machines a migration is about to boot are loaded before
their first fetch (:meth:`BootCache.warm_rounds`).
"""

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time

from sqlalchemy import select

from metalboot_framework import artifacts, machine_steps
from metalboot_framework.boot_endpoints import Answer
from metalboot_framework.exceptions import NotFound
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

# The machines that will fetch soon: a migration prepares or activates them
# (the index on state, updated_at).
_MMT = models.MigrationMachine.__table__
_BOOTING_SOON = select(_MMT.c.machine_id).where(_MMT.c.state.in_(
    (machine_steps.Step.PREPARING.value, machine_steps.Step.ACTIVATING.value)))
# Above this many snapshots to check, read the revisions of all machines at once.
SCAN_FROM = 2000


MISS = object()  # BatchCache.cached: not cached
_monotonic = time.monotonic  # what asyncio's loop.time() reads


class BatchCache:
    """key -> value, kept ``ttl`` seconds; the keys that miss while a load is
    running are loaded together by one call of ``load(keys, stale)`` (in
    ``executor``), which returns {key: value} (a key it leaves out has the value
    None, which is cached too). ``stale`` holds the expired values of those keys
    that had one (kept :attr:`STALE_KEEP` seconds), so that ``load`` may keep a
    value it finds unchanged instead of reading it again.

    With ``refresh``, the entries asked for in the last :attr:`REFRESH_WINDOW`
    seconds are checked in the background before they expire:
    ``refresh({key: value})`` (in ``executor``) returns the keys whose values
    are still current, and those are kept another ``ttl`` from the moment the
    check began. A key asked for again and again then never waits for a load;
    one left alone expires as before.

    The checks begin every half ``ttl`` (from one beginning to the next, not
    from one's end), so that a check may take up to half ``ttl`` and still
    renew the entries before they expire: in a storm the check's thread waits
    for the GIL behind the requests, so a check of many machines takes a good
    part of ``ttl``, and one begun later would let requests miss."""

    STALE_KEEP = 120.0  # seconds an expired entry is kept for ``load``
    REFRESH_AT = 0.5  # of ``ttl``: the time between two beginnings of the background check
    REFRESH_WINDOW = 30.0  # seconds since a key was last asked for

    def __init__(self, executor, load, ttl, batch_size, max_loads=2, refresh=None):
        self._executor = executor
        self._load = load
        self._ttl = ttl
        self._batch_size = batch_size
        self._max_loads = max_loads
        self._refresh = refresh
        self._used = {}  # key -> the refresh round in which it was last answered
        self._round = 0
        self._refresher = None
        self._data = {}  # key -> (expires, value)
        self._pending = {}  # key -> the futures of its waiters
        self._queue = []
        self._loads = 0
        self._scheduled = False
        self._swept = 0.0

    def cached(self, key):
        """The value of ``key`` if it is cached and current, else MISS (no
        coroutine for the common case)."""
        hit = self._data.get(key)
        if hit is not None and hit[0] > _monotonic():  # the event loop's clock
            self._used[key] = self._round
            return hit[1]
        return MISS

    async def get(self, key):
        value = self.cached(key)
        if value is not MISS:
            return value
        loop = asyncio.get_running_loop()
        # a future per waiter: one waiter's cancel is not everyone's (cheaper
        # than a shield around a shared one)
        future = loop.create_future()
        waiters = self._pending.get(key)
        if waiters is not None:
            waiters.append(future)
            return await future
        self._pending[key] = [future]
        self._queue.append(key)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def warm(self, keys):
        """Load those of ``keys`` that are neither cached nor being loaded, for
        nobody yet (on the event loop): a request that asks for one meanwhile
        waits for that load. The number of keys queued."""
        now = _monotonic()
        queued = 0
        for key in keys:
            hit = self._data.get(key)
            if (hit is not None and hit[0] > now) or key in self._pending:
                continue
            self._pending[key] = []
            self._queue.append(key)
            queued += 1
        if queued and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return queued

    def start(self):
        """Begin the background refresh (on the event loop)."""
        if self._refresh is not None and self._ttl > 0 and self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_rounds())

    async def stop(self):
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
            self._refresher = None

    async def _refresh_rounds(self):
        loop = asyncio.get_running_loop()
        interval = self._ttl * self.REFRESH_AT
        rounds = max(1, int(self.REFRESH_WINDOW / interval))
        began = loop.time()
        while True:
            await asyncio.sleep(max(0.0, began + interval - loop.time()))
            began = loop.time()
            self._round += 1
            oldest = self._round - rounds
            self._used = used = {k: r for k, r in self._used.items() if r >= oldest}
            held = {}
            for key in used:
                entry = self._data.get(key)
                if entry is not None and entry[1] is not None and entry[0] > began:
                    held[key] = entry[1]
            if not held:
                continue
            try:
                current = await loop.run_in_executor(self._executor, self._refresh, held)
            except Exception as exc:  # the entries expire; requests load them
                LOG.warning("cannot check %d cached entries: %s: %s", len(held),
                            type(exc).__name__, exc)
                continue
            expires = began + self._ttl
            for key in current:
                entry = self._data.get(key)
                if entry is not None and entry[1] is held[key] and entry[0] < expires:
                    self._data[key] = (expires, entry[1])

    def _flush(self):
        self._scheduled = False
        loop = asyncio.get_running_loop()
        while self._queue and self._loads < self._max_loads:
            keys = self._queue[:self._batch_size]
            del self._queue[:self._batch_size]
            self._loads += 1
            stale = {}
            for key in keys:
                held = self._data.get(key)
                if held is not None and held[1] is not None:
                    stale[key] = held[1]
            # what the load reads is current as of its start at the earliest
            loop.run_in_executor(self._executor, self._load, keys, stale).add_done_callback(
                functools.partial(self._loaded, keys, loop.time()))

    def _loaded(self, keys, began, done):
        self._loads -= 1
        loop = asyncio.get_running_loop()
        now = loop.time()
        exc = done.exception()
        found = {} if exc is not None else done.result()
        for key in keys:
            waiters = [f for f in self._pending.pop(key) if not f.done()]
            if exc is None:
                value = found.get(key)
                self._data[key] = (began + self._ttl, value)
                self._used[key] = self._round  # asked for: refreshed like a hit
            if not waiters:  # its waiters were cancelled (shutdown)
                continue
            for future in waiters:
                if exc is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(value)
        if now - self._swept > 10:
            # expired entries are kept a while for ``load`` to compare with
            self._swept = now
            keep = now - self.STALE_KEEP
            self._data = {k: v for k, v in self._data.items() if v[0] > keep}
        self._flush()


class Snapshot:
    """A machine as a fetch needs it, and its boot.ipxe rendered per interface.
    ``revisions`` (machine, partition) tell whether it is still current."""

    __slots__ = ("machine", "partition", "revisions", "scripts", "_tokens")

    def __init__(self, machine, partition, revisions):
        self.machine = machine
        self.partition = partition
        self.revisions = revisions
        self.scripts = {}  # (interface, token) -> Answer
        self._tokens = {}  # interface -> token

    def token(self, services, interface):
        """The machine's current token for ``interface`` (an HMAC: computed once
        per snapshot and interface)."""
        token = self._tokens.get(interface)
        if token is None:
            token = self._tokens[interface] = services.tokens.machine_token(
                self.machine.id, self.machine.token_generation, interface)
        return token

    def script(self, services, interface, token):
        """boot.ipxe with ``token``: the machine's token or its unbound one."""
        found = self.scripts.get((interface, token))
        if found is None:
            found = self.scripts[(interface, token)] = Answer(artifacts.boot_script(
                services, self.machine, self.partition, interface, token),
                artifacts.SCRIPT_NAME)
        return found


class BootCache:
    """The caches of one boot server process and the loads that fill them (in
    the ``db_threads`` read threads), with the counts reported at its stop."""

    def __init__(self, services, opts):
        self.services = services
        self.opts = opts
        self.reads = concurrent.futures.ThreadPoolExecutor(opts.db_threads, "boot-db")
        # Templates render the same bytes for the same machine and partition;
        # a hook that amends scripts may not, so its scripts are rendered anew
        # whenever the snapshot expires (and busy snapshots are not refreshed).
        self._keep_scripts = not services.hooks.has("metalboot_amend_boot_script")
        self.snapshots = BatchCache(
            self.reads, self._load_snapshots, opts.cache_ttl, opts.read_batch_size,
            refresh=self._current_snapshots if self._keep_scripts else None)
        self.macs = BatchCache(self.reads, self._load_macs, opts.cache_ttl,
                               opts.read_batch_size)
        self.partition_artifacts = BatchCache(self.reads, self._load_partition_artifacts,
                                              opts.cache_ttl, opts.read_batch_size)
        # snapshots read from the database / expired or refreshed ones kept by
        # their revisions (read threads add to them; reported at stop)
        self.snapshots_read = 0
        self.snapshots_kept = 0
        self.snapshots_warmed = 0  # loads (read or kept) the warm-up asked for
        self._warmer = None
        self._counting = threading.Lock()

    # -- loading, in the read threads ---------------------------------------------
    def _load_snapshots(self, machine_ids, stale):
        """Snapshots of ``machine_ids``. An expired one whose revisions are still
        the database's is kept (one narrow query for all of them); the others
        are read anew."""
        with self.services.db.read_conn() as conn:
            found = {m: stale[m] if self._keep_scripts else
                     Snapshot(stale[m].machine, stale[m].partition, stale[m].revisions)
                     for m in self._unchanged(conn, stale)}
            changed = [m for m in machine_ids if m not in found]
            loaded = artifacts.load_snapshots(conn, changed, self.services.password_key) \
                if changed else {}
        with self._counting:
            self.snapshots_read += len(loaded)
        for machine_id, value in loaded.items():
            snapshot = found[machine_id] = Snapshot(*value)
            old = stale.get(machine_id)
            if self._keep_scripts and old is not None and old.machine == snapshot.machine \
                    and old.partition == snapshot.partition:
                snapshot.scripts = old.scripts
        return found

    def _current_snapshots(self, held):
        """The background refresh: those of ``held`` still current."""
        with self.services.db.read_conn() as conn:
            return self._unchanged(conn, held)

    def _unchanged(self, conn, held):
        """The machines of ``held`` ({id: Snapshot}) whose snapshots are still
        current, by their revisions: queries of ``read_batch_size`` machines, or
        for more than :data:`SCAN_FROM` one narrow read of every machine's
        revisions (cheaper than many lists of ids)."""
        if not held:
            return []
        ids = list(held)
        if len(ids) > SCAN_FROM:
            current = artifacts.snapshot_revisions(conn, None)
        else:
            current = {}
            for start in range(0, len(ids), self.opts.read_batch_size):
                current.update(artifacts.snapshot_revisions(
                    conn, ids[start:start + self.opts.read_batch_size]))
        kept = [m for m in ids if current.get(m) == held[m].revisions]
        with self._counting:
            self.snapshots_kept += len(kept)
        return kept

    def _load_macs(self, keys, _stale):
        with self.services.db.read_conn() as conn:
            return artifacts.machines_by_mac(conn, self.services, keys)

    def _load_partition_artifacts(self, keys, _stale):
        """{(partition, interface, name): Answer}."""
        with self.services.db.read_conn() as conn:
            partitions = artifacts.load_partitions(conn, {k[0] for k in keys})
        found = {}
        for key in keys:
            partition_id, interface, name = key
            try:
                artifact = artifacts.partition_artifact(
                    self.services, partitions.get(partition_id), interface, name)
            except NotFound:
                continue
            found[key] = Answer.of(artifact, name)
        return found

    # -- what a boot report and the server ask of a source ---------------------------
    def authenticate_report(self, machine_id, token):
        """:func:`metalboot_framework.artifacts.authenticate_report` on the
        database (in a read thread)."""
        with self.services.db.read_conn() as conn:
            return artifacts.authenticate_report(self.services, conn, machine_id, token)

    @staticmethod
    def unavailable(_partition_id):
        """The database is always current: never a reason to refuse."""
        return None

    # -- warming: snapshots loaded before the fetches that need them --------------------
    async def _warm_rounds(self):
        """Every ``warm_interval``, the snapshots of the machines that a migration
        prepares or activates are loaded if not cached: such a machine fetches
        its boot.ipxe right after its reset, and would otherwise wait for the
        load (a query and two hand-overs between threads, more than half of
        the time from its request to its evidence in a migration of 10,000)."""
        loop = asyncio.get_running_loop()
        failing = False
        while True:
            await asyncio.sleep(self.opts.warm_interval)
            try:
                booting = await loop.run_in_executor(self.reads, self._booting_soon)
            except Exception as exc:  # the fetches load what they need themselves
                if not failing:  # once, not ten times a second
                    LOG.warning("cannot read the machines about to boot (snapshots are "
                                "loaded by their fetches until it works again): %s: %s",
                                type(exc).__name__, exc)
                failing = True
                continue
            if failing:
                LOG.info("reading the machines about to boot works again")
                failing = False
            self.snapshots_warmed += self.snapshots.warm(booting)

    def _booting_soon(self):
        with self.services.db.read_conn() as conn:
            return conn.execute(_BOOTING_SOON).scalars().all()

    def start(self):
        """Begin the background refresh and warm-up (on the event loop)."""
        self.snapshots.start()
        if self.opts.warm_interval > 0 and self.opts.cache_ttl > 0:
            self._warmer = asyncio.get_running_loop().create_task(self._warm_rounds())

    async def stop(self):
        if self._warmer is not None:
            self._warmer.cancel()
            await asyncio.gather(self._warmer, return_exceptions=True)
        await self.snapshots.stop()
        LOG.info("machine snapshots: %d read from the database, %d kept after their "
                 "revisions were checked; %d loaded before a fetch asked",
                 self.snapshots_read, self.snapshots_kept, self.snapshots_warmed)

    def shutdown(self):
        """Stop the read threads (once the requests are done)."""
        self.reads.shutdown(wait=True)
