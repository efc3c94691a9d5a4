"""metalboot-boot-server: the artifact server for boot storms (granian, asyncio).

It serves exactly what booting machines and their BMCs call, with the same
answers as the Flask blueprint of metalboot-server (both decide through
:mod:`metalboot_framework.artifacts`):

- ``GET /boot/<machine>/<interface>/<token>/<name>`` (boot.ipxe and plugin
  artifacts; every fetch is boot evidence),
- ``GET /boot/mac/<mac>/<interface>/boot.ipxe`` (evidence too),
- ``GET /boot/partitions/<partition>/<interface>/<name>`` (ISOs, in ranges),
- ``POST /v1/machines/<id>/boot-report``.

Operators point ``[api] public_url`` at it, so that the URLs machines are given
lead here; the REST API stays on metalboot-server / metalboot-api, on the same
database. Where the time goes in a boot storm, and how it is saved:

- HTTP is granian's (Rust: hyper on tokio), embedded in the process's asyncio
  event loop as an RSGI application: parsing and writing cost no Python; one
  event loop runs the answers; database calls run in threads;
- evidence is group-committed: each fetch queues its row and waits; the rows
  queued are inserted by one transaction (on SQLite as multi-row INSERTs, on
  the event loop when the write lock is free at once, else by the writer
  thread), then every fetch of the batch is answered (no answered fetch
  without committed evidence; rows that queue during a commit form the next
  batch);
- what a fetch reads (machine, NICs, partition, the rendered boot.ipxe; MAC
  lookups; partition artifacts) is cached for ``[boot_server] cache_ttl``
  seconds, and concurrent misses are loaded by one query. A token rotation or
  any change of a machine or partition shows here within that time;
- an expired machine is not read again unless it changed: one narrow query
  for the revisions of all expired machines (bumped by database triggers on
  any write of what a snapshot holds) tells which to read; the others keep
  their snapshot and rendered boot.ipxe. In a storm most machines do not
  change, so most fetches cost no read of the machine at all.
"""

import asyncio
import concurrent.futures
import functools
import gc
import itertools
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.parse

from granian.constants import HTTPModes, Interfaces, TaskImpl
from granian.log import LogLevels
from granian.rsgi import ProtocolClosed as RSGIProtocolClosed
from granian.server.embed import Server as EmbeddedServer
from sqlalchemy import select
from werkzeug import exceptions as wz_exceptions
from werkzeug.http import http_date, is_resource_modified, parse_etags, parse_range_header

from metalboot_framework import artifacts, logs
from metalboot_framework.api import spec
from metalboot_framework.api.schemas import BootReportSchema, canonical_machine_id
from metalboot_framework.cmd import common
from metalboot_framework import machine_steps
from metalboot_framework.conf import CONF
from metalboot_framework.exceptions import InvalidInput, MetalbootError, NotFound
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)
ACCESS_LOG = logging.getLogger(__name__ + ".access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Request headers that make an artifact answer conditional (werkzeug's rules).
_CONDITIONAL = ("range", "if-none-match", "if-match", "if-modified-since",
                "if-unmodified-since", "if-range")
_GET = ("GET", "HEAD")
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


class Answer:
    """An artifact as it is answered: its ETag, its :class:`OpenFile` (None for
    bytes in memory) and the headers of every 200 for it, built once."""

    __slots__ = ("artifact", "opened", "etag", "headers", "content_type", "last_modified")

    def __init__(self, artifact, name, opened=None):
        self.artifact = artifact
        self.opened = opened
        self.etag = opened.etag if opened else artifacts.content_etag(artifact.content)
        self.content_type = artifacts.content_type(artifact)
        self.last_modified = http_date(int(opened.stat.st_mtime)) if opened else None
        # the headers a 304 keeps too (werkzeug's rule: no entity headers)
        self.headers = [("Content-Disposition", artifacts.content_disposition(name)),
                        ("ETag", f'"{self.etag}"'), ("Accept-Ranges", "bytes"),
                        ("Cache-Control", "no-cache" if opened else "no-cache, max-age=0")]


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


class _GroupFuture(asyncio.Future):
    """The future a group of evidence rows shares: a request that is cancelled
    while it waits (its client went away) must not cancel the others' (a task
    cancelled while it awaits this future is cancelled when the future is done)."""

    def cancel(self, msg=None):
        return False


class EvidenceWriter:
    """Group commit of boot evidence: :meth:`add` queues a row and returns a
    future that is resolved once the row is committed (with its id when asked).

    On SQLite a batch is committed on the event loop itself when the database's
    write lock is free at that moment (a few rows cost well under a millisecond
    there, and a hand-over to a thread and back costs more than that in a
    storm: each way waits for the GIL), else by the writer thread, which waits
    for the lock. The inline commits leave the WAL's checkpoints to that thread
    (:data:`CHECKPOINT_INTERVAL`). On PostgreSQL every batch goes to the
    thread (a commit is a round trip)."""

    CHECKPOINT_INTERVAL = 1.0  # seconds between checkpoints while commits are inline

    def __init__(self, services, batch_size, batch_wait, log_rows=False):
        self.services = services
        self.batch_size = batch_size
        self.batch_wait = batch_wait
        self.log_rows = log_rows
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "boot-evidence")
        self._queue = []  # groups of rows: (future, [row, ...], with_id)
        self._busy = False
        self._timer = None
        self._loop = asyncio.get_running_loop()  # made on the event loop
        self._idle = asyncio.Event()
        self._idle.set()
        self._inline = services.db.is_sqlite
        self._checkpoint_at = None  # when the WAL is to be checkpointed next
        self.batches = 0
        self.inline_batches = 0
        self.rows = 0

    def add(self, row, with_id=False):
        """A future resolved once ``row`` is committed (to its id ``with_id``).

        Rows without an id wait in groups of up to ``batch_size`` that share one
        future (in a storm, thousands a second: a future and a callback each
        cost the event loop more than the row's INSERT); a row with its id has a
        group of its own. A batch takes whole groups, so a group is committed,
        or fails, in one transaction.
        """
        queue = self._queue
        if not with_id and queue:
            group = queue[-1]
            if not group[2] and len(group[1]) < self.batch_size:
                group[1].append(row)
                return group[0]
        loop = self._loop
        future = loop.create_future() if with_id else _GroupFuture(loop=loop)
        queue.append((future, [row], with_id))
        self._idle.clear()
        if not self._busy and self._timer is None:
            self._timer = loop.call_later(self.batch_wait, self._flush) if self.batch_wait \
                else loop.call_soon(self._flush)
        return future

    def _take(self):
        """The next batch of groups: as many whole groups as fit in
        ``batch_size`` rows, at least one."""
        queue, size, taken = self._queue, 0, 0
        while taken < len(queue) and (not taken or size + len(queue[taken][1])
                                       <= self.batch_size):
            size += len(queue[taken][1])
            taken += 1
        batch = queue[:taken]
        del queue[:taken]
        return batch

    def _flush(self):
        self._timer = None
        while self._queue and not self._busy:
            batch = self._take()
            # one time for the batch: when it leaves the queue, at most a commit
            # after each of its fetches (never before one)
            now = models.utcnow()
            rows = []
            for _, group, with_id in batch:
                for row in group:
                    if row["created_at"] is None:
                        row["created_at"] = now
                    rows.append((row, with_id))
            if self._inline:
                try:
                    ids = self._write(rows, nowait=True)
                except Exception as exc:
                    self._answer(batch, None, exc)
                    continue
                if ids is not None:
                    self.inline_batches += 1
                    self._answer(batch, ids, None)
                    self._checkpoint_soon()
                    continue
            self._loop.run_in_executor(self._executor, self._write, rows).add_done_callback(
                functools.partial(self._written, batch))
            self._busy = True
        if not self._queue and not self._busy and self._timer is None:
            self._idle.set()

    def _write(self, rows, nowait=False):
        """The ids of the rows asked for with them (a list); None when ``nowait``
        and the database's write lock is taken."""
        db = self.services.db
        with db.write_conn_nowait() if nowait else db.write_conn() as conn:
            if conn is None:
                return None
            artifacts.insert_evidence(conn, [row for row, with_id in rows if not with_id])
            return artifacts.insert_evidence(
                conn, [row for row, with_id in rows if with_id], with_ids=True) or []

    def _written(self, batch, done):
        self._busy = False
        exc = done.exception()
        self._answer(batch, None if exc is not None else done.result(), exc)
        self._flush()  # what queued during this commit: the next batch, now

    def _answer(self, batch, ids, exc):
        rows = sum(len(group) for _, group, _ in batch)
        if exc is not None:
            LOG.error("cannot record %d boot evidence rows: %s: %s", rows,
                      type(exc).__name__, exc)
        ids = iter(ids or ())
        self.batches += 1
        self.rows += rows if exc is None else 0
        for future, group, with_id in batch:
            evidence_id = next(ids) if with_id and exc is None else None
            if self.log_rows and exc is None:
                for row in group:
                    artifacts.log_evidence(evidence_id, row)
            if not future.done():
                if exc is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(evidence_id)

    def _checkpoint_soon(self):
        """After inline commits: a checkpoint in the writer thread, at most one
        per CHECKPOINT_INTERVAL."""
        now = self._loop.time()
        if self._checkpoint_at is None:
            self._checkpoint_at = now + self.CHECKPOINT_INTERVAL
        elif now >= self._checkpoint_at:
            self._checkpoint_at = None
            self._executor.submit(self._checkpoint)

    def _checkpoint(self):
        try:
            self.services.db.checkpoint()
        except Exception as exc:  # the next one may do; SQLite checkpoints anyway
            LOG.warning("cannot checkpoint the database: %s: %s", type(exc).__name__, exc)

    def hurry(self):
        """Stop waiting for rows to join a batch (shutdown): commit what is queued."""
        self.batch_wait = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._flush()

    async def close(self):
        """Commit everything queued (SIGTERM), then stop the writer thread."""
        self.hurry()
        await self._idle.wait()
        if self._checkpoint_at is not None:
            self._executor.submit(self._checkpoint)
        self._executor.shutdown(wait=True)


class OpenFile:
    """A file artifact opened once: its stat, ETag and file object.

    pread() reads at explicit offsets, so one file object serves every
    response at once, with the bytes of the stat its ETag and length come
    from; it is closed when the last of them lets go of it."""

    __slots__ = ("stat", "etag", "file")

    def __init__(self, path):
        self.file = open(path, "rb")  # noqa: SIM115 (kept open on purpose)
        self.stat = os.fstat(self.file.fileno())
        self.etag = artifacts.file_etag(path, self.stat)


class Request:
    """What the answers read of a request: granian's RSGI scope, plus the
    client's address without its port."""

    __slots__ = ("scope", "proto", "method", "path", "headers", "remote")

    def __init__(self, scope, proto):
        self.scope = scope
        self.proto = proto
        self.method = scope.method
        self.path = scope.path  # percent-decoded, as werkzeug's PATH_INFO
        self.headers = scope.headers  # names in lower case
        # "10.0.0.1:port" or "[fd00::1]:port"
        self.remote = scope.client.rpartition(":")[0].strip("[]")

    async def body(self, limit):
        """The request body; RequestTooLarge past ``limit`` bytes."""
        length = self.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise RequestTooLarge()
        chunks, size = [], 0
        async for chunk in self.proto:
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge()
            chunks.append(chunk)
        return b"".join(chunks)


class RequestTooLarge(Exception):
    """A request body larger than ``[api] max_request_body_size``."""


class _ShortFile(Exception):
    """A file artifact that gave fewer bytes than its stat promised."""

    def __init__(self, opened, offset, count, got):
        super().__init__(f"{opened.file.name}: {got} bytes at offset {offset} instead of "
                         f"{count}: the file changed since it was opened")


class Reply:
    """An answer to send: status, headers, and bytes in memory or the span
    [start, stop) of an :class:`OpenFile`."""

    __slots__ = ("status", "headers", "body", "opened", "start", "stop")

    def __init__(self, status, headers, body=b"", opened=None, start=0, stop=0):
        self.status = status
        self.headers = headers
        self.body = body
        self.opened = opened
        self.start = start
        self.stop = stop

    @property
    def length(self):
        return self.stop - self.start if self.opened is not None else len(self.body)


class _Conditional(Exception):
    """A conditional request answered without the artifact's bytes (304, 412)."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _conditional_headers(request):
    """Whether the request has any of _CONDITIONAL (a plain loop: the hot path)."""
    headers = request.headers
    for name in _CONDITIONAL:
        if name in headers:
            return True
    return False


def _conditional(request, etag, length, last_modified=None):
    """Apply Range and the If-* headers as werkzeug does for send_file: the
    (start, stop, Content-Range) to send, None for the whole artifact; raises
    _Conditional (304/412) or werkzeug's RequestedRangeNotSatisfiable (416)."""
    headers = request.headers
    environ = {"REQUEST_METHOD": request.method}
    for name in _CONDITIONAL:
        value = headers.get(name)
        if value is not None:
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    if "HTTP_RANGE" in environ and length and (
            "HTTP_IF_RANGE" not in environ or not is_resource_modified(
                environ, etag, None, last_modified, ignore_if_range=False)):
        parsed = parse_range_header(environ["HTTP_RANGE"])
        span = parsed.range_for_length(length) if parsed else None
        content_range = parsed.to_content_range_header(length) if parsed else None
        if span is None or content_range is None:
            raise wz_exceptions.RequestedRangeNotSatisfiable(length)
        return span[0], span[1], content_range
    if not is_resource_modified(environ, etag, None, last_modified):
        raise _Conditional(412 if parse_etags(environ.get("HTTP_IF_MATCH")) else 304)
    return None


class BootServer:
    """The RSGI application and what it keeps between requests."""

    def __init__(self, services, opts, max_body_size):
        self.services = services
        self.opts = opts
        self.max_body_size = max_body_size
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
        self.evidence = None  # an EvidenceWriter, made on the event loop
        # snapshots read from the database / expired or refreshed ones kept by
        # their revisions (read threads add to them; reported at stop)
        self.snapshots_read = 0
        self.snapshots_kept = 0
        self.snapshots_warmed = 0  # loads (read or kept) the warm-up asked for
        self._warmer = None
        self._counting = threading.Lock()
        # Templates are read once: no stat() of the template file per rendering.
        services.templates.auto_reload = False
        self._id_prefix = secrets.token_hex(4)
        self._ids = itertools.count()
        self._expires = (0, "")

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
            found[key] = self._answer_of(artifact, name)
        return found

    @staticmethod
    def _answer_of(artifact, name):
        """The Answer of an artifact; opens files (call it in a thread)."""
        return Answer(artifact, name, OpenFile(artifact.path) if artifact.path else None)

    # -- answers ---------------------------------------------------------------------
    def _request_id(self, request):
        given = request.headers.get("x-request-id")
        if given and _REQUEST_ID.fullmatch(given):
            return given
        # unique like the API's random ids, without a system call per request
        return f"{self._id_prefix}{next(self._ids) & 0xFFFFFFFF:08x}"

    def _json(self, request, status, document, headers=None, request_id=None):
        body = (json.dumps(document, separators=(",", ":")) + "\n").encode()
        out = [("Content-Type", "application/json"),
               ("X-Request-Id", request_id or self._request_id(request))]
        out.extend(headers or ())
        return Reply(status, out, body)

    def _error(self, request, code, message, fields=None, headers=None, request_id=None):
        return self._json(request, code, {"error": {"code": code, "message": message,
                                                    "fields": fields or {}}}, headers,
                          request_id)

    def _metalboot_error(self, request, exc):
        headers = [("WWW-Authenticate", 'Bearer realm="metalboot"')] if exc.code == 401 \
            else None
        return self._error(request, exc.code, exc.message, exc.fields, headers)

    def _now_date(self):
        now = int(time.time())
        if self._expires[0] != now:
            self._expires = (now, http_date(now))
        return self._expires[1]

    def _artifact_response(self, request, answer):
        """Headers and conditional handling as Flask's send_file gives them."""
        headers = answer.headers.copy()
        headers.append(("X-Request-Id", self._request_id(request)))
        opened = answer.opened
        if opened is None:
            headers.append(("Expires", self._now_date()))
            length = len(answer.artifact.content)
        else:
            length = opened.stat.st_size
        span = None
        if _conditional_headers(request):
            try:
                span = _conditional(request, answer.etag, length, answer.last_modified)
            except _Conditional as conditional:
                # no entity headers but Expires on a 304 (werkzeug's rule)
                return Reply(conditional.status, headers)
        headers.append(("Content-Type", answer.content_type))
        if answer.last_modified is not None:
            headers.append(("Last-Modified", answer.last_modified))
        start, stop = (0, length) if span is None else span[:2]
        status = 200
        if span is not None:
            headers.append(("Content-Range", span[2]))
            status = 206
        if opened is not None:
            return Reply(status, headers, opened=opened, start=start, stop=stop)
        content = answer.artifact.content
        return Reply(status, headers, content if span is None else content[start:stop])

    async def _answer(self, request, snapshot, interface, token, name, by_mac=None):
        """Check access, choose the artifact, record the fetch, then answer."""
        machine = snapshot.machine if snapshot is not None else None
        try:
            bound = artifacts.check_access(
                self.services, machine, interface, token, name, request.remote,
                snapshot.token(self.services, interface) if snapshot is not None else None)
            if name == artifacts.SCRIPT_NAME:
                answer = snapshot.script(self.services, interface, token)
            else:
                answer = await asyncio.get_running_loop().run_in_executor(
                    self.reads, lambda: self._answer_of(artifacts.plugin_artifact(
                        self.services, machine, snapshot.partition, interface, name), name))
            response = self._artifact_response(request, answer)
        except MetalbootError as exc:
            return self._metalboot_error(request, exc)
        except wz_exceptions.HTTPException as exc:
            return self._error(request, exc.code, exc.description)
        if response.status in artifacts.EVIDENCE_STATUSES:
            await self.evidence.add(artifacts.fetch_evidence(
                machine.id, interface, name, request.remote, request.headers.get("range"),
                timed=False, bound=bound, by_mac=by_mac))
        return response

    # -- the RSGI application ---------------------------------------------------------
    async def __rsgi__(self, scope, proto):
        """Every request: answered by :meth:`handle`, then sent (and logged)."""
        try:
            request = Request(scope, proto)
            reply = await self.handle(request)
            try:
                await self._send(request, reply)
            except (ConnectionError, RSGIProtocolClosed):
                pass  # the client went away; its evidence (if any) is committed
            except _ShortFile as exc:  # nothing was sent yet
                request_id = self._request_id(request)
                LOG.error("request %s: %s", request_id, exc)
                reply = self._error(request, 500, "internal error; see the server log for "
                                                  f"request {request_id}", request_id=request_id)
                await self._send(request, reply)
        except Exception:  # what granian would answer 500 without a word in our log
            LOG.exception("request %s %s failed unexpectedly", scope.method, scope.path)
            raise
        if self.opts.access_log:
            path = logs.redact(request.path + (f"?{scope.query_string}"
                                               if scope.query_string else ""))
            ACCESS_LOG.info("%s %s %s %d %d", request.remote, request.method, path,
                            reply.status, reply.length,
                            extra={"http_method": request.method, "path": path,
                                   "status": reply.status, "remote_addr": request.remote})

    async def _send(self, request, reply):
        """The reply's headers and bytes; a file span in chunks read by pread()
        (the stream waits for the client at each chunk); no bytes to a HEAD.
        A file shorter than its stat said (changed on disk since it was
        opened) raises _ShortFile before anything is sent, else ends the
        connection short of the length announced."""
        proto = request.proto
        headers = reply.headers
        if reply.status != 304:
            headers.append(("Content-Length", str(reply.length)))
        head = request.method == "HEAD"
        if reply.opened is None or head or not reply.length:
            proto.response_bytes(reply.status, headers, b"" if head else reply.body)
            return
        fd = reply.opened.file.fileno()
        offset, count = reply.start, reply.length
        if count <= self.FILE_CHUNK:  # one read, one send (a machine's 256 KiB range)
            data = os.pread(fd, count, offset)
            if len(data) != count:
                raise _ShortFile(reply.opened, offset, count, len(data))
            proto.response_bytes(reply.status, headers, data)
            return
        stream = proto.response_stream(reply.status, headers)
        while count:
            chunk = os.pread(fd, min(count, self.FILE_CHUNK), offset)
            if not chunk:
                raise ConnectionResetError("the file is shorter than it was")
            await stream.send_bytes(chunk)
            offset, count = offset + len(chunk), count - len(chunk)

    FILE_CHUNK = 256 * 1024

    async def handle(self, request):
        """The routes of the Flask blueprint, matched on the percent-decoded path
        in segments without braces, by splitting it once: GET/HEAD
        /boot/<a>/<b>/<c>/<d>, POST /v1/machines/<id>/boot-report and, for any
        other path and method, the API's 404."""
        path = request.path
        try:
            expect = request.headers.get("expect")
            if expect is not None and expect.lower() != "100-continue" and \
                    request.scope.http_version == "1.1":
                return self._error(request, 417, f"unknown Expect: {expect}")
            if "\x00" in path:
                return self._error(request, 404,
                                   "not found: the path contains a NUL character")
            parts = path.split("/")
            # path variables are ``[^{}/]+``: no empty segment, no brace
            variables = "" not in parts[1:] and "{" not in path and "}" not in path
            if len(parts) == 6 and parts[1] == "boot" and request.method in _GET and variables:
                first, second, third, name = parts[2:]
                # fixed segments first, as Flask's rules rank them
                if first == "mac" and name == artifacts.SCRIPT_NAME:
                    return await self.script_by_mac(request, second, third)
                if first == "partitions":
                    return await self.partition_artifact(request, second, third, name)
                return await self.machine_artifact(request, first, second, third, name)
            if len(parts) == 5 and parts[1] == "v1" and parts[2] == "machines" \
                    and parts[4] == "boot-report" and request.method == "POST" and variables:
                return await self.boot_report(request, canonical_machine_id(parts[3]))
            return self._error(request, 404, wz_exceptions.NotFound.description)
        except Exception:
            request_id = self._request_id(request)
            LOG.exception("request %s failed unexpectedly", request_id)
            return self._error(request, 500, "internal error; see the server log for "
                                             f"request {request_id}", request_id=request_id)

    async def machine_artifact(self, request, machine_id, interface, token, name):
        if interface not in self.services.interfaces:
            return self._metalboot_error(request, artifacts.not_found())
        snapshot = self.snapshots.cached(machine_id)
        if snapshot is MISS:
            snapshot = await self.snapshots.get(machine_id)
        return await self._answer(request, snapshot, interface, token, name)

    async def script_by_mac(self, request, mac, interface):
        machine_id = await self.macs.get((artifacts.normalize_mac(mac), interface))
        snapshot = await self.snapshots.get(machine_id) if machine_id is not None else None
        if snapshot is None:
            return self._metalboot_error(request, artifacts.not_found())
        binding = artifacts.mac_binding(self.services, snapshot.machine, request.remote)
        token = snapshot.token(self.services, interface) if binding != artifacts.UNBOUND \
            else artifacts.script_token(self.services, snapshot.machine, interface, binding)
        return await self._answer(request, snapshot, interface, token,
                                  artifacts.SCRIPT_NAME, by_mac=binding)

    async def partition_artifact(self, request, partition_id, interface, name):
        answer = await self.partition_artifacts.get((partition_id, interface, name))
        if answer is None:
            return self._metalboot_error(request, artifacts.not_found())
        try:
            return self._artifact_response(request, answer)
        except wz_exceptions.HTTPException as exc:
            return self._error(request, exc.code, exc.description)

    async def boot_report(self, request, machine_id):
        try:
            # the checks, messages and order of the API's @endpoint(body=...)
            content_type = request.headers.get("content-type")
            mimetype = content_type.split(";", 1)[0].strip().lower() \
                if content_type is not None else ""
            if mimetype != "application/json":
                raise spec.UnsupportedMediaType(
                    f"the body must be application/json, not {mimetype or 'absent'}")
            data = spec.parse_json(await request.body(self.max_body_size))
            if not isinstance(data, dict):
                raise InvalidInput("the body must be a JSON object",
                                   fields={"_schema": ["must be an object"]})
            body = spec._load(BootReportSchema(), data, "body")
            query = urllib.parse.parse_qsl(request.scope.query_string,
                                           keep_blank_values=True)
            if query:
                unknown = sorted({k for k, _ in query})
                raise InvalidInput(f"unknown query parameter(s): {', '.join(unknown)}",
                                   fields={k: ["Unknown field."] for k in unknown})
            token = artifacts.bearer_token(request.headers.get("authorization")) \
                or body.get("token")
            bound = await asyncio.get_running_loop().run_in_executor(
                self.reads, self._check_report, machine_id, token, body["boot_interface"])
        except MetalbootError as exc:
            return self._metalboot_error(request, exc)
        except RequestTooLarge:
            return self._error(request, 413, "the request body is larger than [api] "
                                             "max_request_body_size allows")
        evidence_id = await self.evidence.add(
            artifacts.report_evidence(machine_id, body, request.remote, timed=False,
                                      bound=bound),
            with_id=True)
        return self._json(request, 201, {"machine_id": machine_id, "evidence_id": evidence_id})

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

    def _check_report(self, machine_id, token, boot_interface):
        with self.services.db.read_conn() as conn:
            return artifacts.check_report(self.services, conn, machine_id, token,
                                          boot_interface)

    async def start(self):
        self.snapshots.start()
        if self.opts.warm_interval > 0 and self.opts.cache_ttl > 0:
            self._warmer = asyncio.get_running_loop().create_task(self._warm_rounds())
        self.evidence = EvidenceWriter(self.services, self.opts.evidence_batch_size,
                                       self.opts.evidence_batch_wait,
                                       log_rows=self.opts.access_log)

    async def stop(self):
        if self._warmer is not None:
            self._warmer.cancel()
            await asyncio.gather(self._warmer, return_exceptions=True)
        await self.snapshots.stop()
        await self.evidence.close()
        LOG.info("boot evidence committed: %d rows in %d transactions (%d of them on "
                 "the event loop)", self.evidence.rows, self.evidence.batches,
                 self.evidence.inline_batches)
        LOG.info("machine snapshots: %d read from the database, %d kept after their "
                 "revisions were checked; %d loaded before a fetch asked",
                 self.snapshots_read, self.snapshots_kept, self.snapshots_warmed)
        self.reads.shutdown(wait=True)


class _HTTPServer(EmbeddedServer):
    """granian's embedded server on our event loop; :attr:`started` is set once
    its worker serves (or its start failed: :attr:`failure`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = asyncio.Event()
        self.failure = None

    def startup(self, spawn_target, target_loader):
        try:
            super().startup(spawn_target, target_loader)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self.started.set()


def _listen_address(host, port):
    """``host`` (an address or a name) as the IP address granian listens on;
    fails unless nothing listens on that address and port yet: granian's
    sockets share a port with SO_REUSEPORT, so a second boot server would
    split the traffic with the first instead of failing."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except OSError as exc:
        common.fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            common.fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    return sockaddr[0]


async def serve(services, opts, max_body_size, address=None):
    """Serve until SIGTERM or SIGINT; then finish the requests in progress and
    commit their evidence. ``address``: ``opts.host_ip`` resolved (granian
    takes an IP address only)."""
    address = address or opts.host_ip
    server = BootServer(services, opts, max_body_size)
    await server.start()
    http = _HTTPServer(server, address=address, port=opts.port,
                       interface=Interfaces.RSGI, websockets=False, backlog=opts.backlog,
                       http=HTTPModes.http1, task_impl=TaskImpl(opts.task_impl),
                       # granian's errors (not its notices) through our handlers;
                       # incremental: the handlers in place are left alone
                       log_level=LogLevels.error, log_dictconfig={
                           "incremental": True, "formatters": {}, "handlers": {},
                           "loggers": {}})
    # the requests in progress at a stop get this long, then the server stops
    # waiting for them (granian cannot cancel them: they are answered meanwhile)
    http.workers_kill_timeout = max(opts.shutdown_timeout, 0.001)
    serving = asyncio.ensure_future(http.serve())
    started = asyncio.ensure_future(http.started.wait())
    try:
        await asyncio.wait([serving, started], return_when=asyncio.FIRST_COMPLETED)
        if http.failure is not None or serving.done():
            common.fail(f"cannot listen on {opts.host_ip}:{opts.port}: "
                        f"{http.failure or serving.exception()}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        received = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, lambda s=signum: (received.append(s), stop.set()))
        host = f"[{opts.host_ip}]" if ":" in opts.host_ip else opts.host_ip
        LOG.info("metalboot-boot-server listening on http://%s:%s (boot interfaces: %s; "
                 "machines reach it as [api] public_url = %s)", host, opts.port,
                 ", ".join(services.interfaces.names()), services.public_url)
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():  # the HTTP server ended by itself: do not linger deaf
            stopping.cancel()
            LOG.error("the HTTP server stopped unexpectedly: %s",
                      serving.exception() if not serving.cancelled() else "cancelled")
            raise SystemExit(1)
        LOG.info("received %s, shutting down", signal.Signals(received[0]).name)
        # requests waiting for a batch to fill commit their evidence now
        server.evidence.hurry()
    finally:
        started.cancel()
        if not serving.done():
            http.stop()  # stop accepting; the requests in progress are answered
            ended = await asyncio.gather(serving, return_exceptions=True)
            if isinstance(ended[0], (TimeoutError, asyncio.TimeoutError)):
                LOG.warning("requests still in progress after [boot_server] "
                            "shutdown_timeout (%s s)", opts.shutdown_timeout)
        await server.stop()  # the requests are done: flush, stop threads


def _serve_process(address):
    from metalboot_framework.cmd.server import load_services
    services = load_services()
    gc.collect()
    gc.freeze()  # what is loaded now lives as long as the process
    # not asyncio.run(): its final sweep of tasks (asyncio.all_tasks) stumbles on
    # the requests granian's Rust task implementation steps (they are not asyncio
    # tasks); every request is done by the time serve() returns
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(serve(services, CONF.boot_server,
                                      CONF.api.max_request_body_size, address))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
        services.db.dispose()
        LOG.info("metalboot-boot-server stopped")


def _exit_while_starting(_signum, _frame):
    raise SystemExit(0)


def _serve_workers(count, address):
    """``count`` forked server processes on one port; SIGTERM/SIGINT reach them all,
    and the parent exits when they have, with the worst exit status."""
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # a worker: its own database engines, plugins and event loop
            code = 1
            try:
                # stopped while it starts (before its event loop handles the
                # signals): nothing is queued yet, so that is a clean exit
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, _exit_while_starting)
                _serve_process(address)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                LOG.exception("metalboot-boot-server worker failed")
            finally:
                os._exit(code)
        children.append(pid)

    def _forward(signum, _frame):
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    worst = 0
    for child in children:
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        if code:
            LOG.error("metalboot-boot-server worker %d exited with %d", child, code)
            _forward(signal.SIGTERM, None)  # one gone: stop the others too
            worst = worst or (code if code > 0 else 1)
    return worst


def main(argv=None):
    with common.interrupted_quietly():
        return _main(argv)


def _main(argv):
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      "Serve boot artifacts and boot reports to booting machines.")
    common.setup_logging(CONF.debug)
    workers = CONF.boot_server.workers or len(os.sched_getaffinity(0))
    address = _listen_address(CONF.boot_server.host_ip, CONF.boot_server.port)
    if workers > 1:
        return _serve_workers(workers, address)
    _serve_process(address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
