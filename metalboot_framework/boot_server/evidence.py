"""Boot evidence, group-committed: each answered fetch queues its row and
waits; the rows queued are written by one transaction, then every fetch of
the batch is answered (no answered fetch without committed evidence; rows that
queue during a commit form the next batch).

:class:`GroupCommit` is that queue on an asyncio event loop, whatever the
rows are written to; :class:`EvidenceWriter` writes them to the database
(metalboot-boot-server), the boot agent's journal to a local file
(:mod:`metalboot_framework.agent.journal`).

It is not :mod:`metalboot_framework.store.group_commit`, the conductor's
thread-based one: its waiters are requests on one asyncio event loop (an
:class:`asyncio.Future` per group of rows, no thread per waiter), and on
SQLite it commits on the event loop itself when the write lock is free.
"""

import asyncio
import concurrent.futures
import functools
import logging

from metalboot_framework import artifacts
from metalboot_framework.store import models

LOG = logging.getLogger(__name__)


class _GroupFuture(asyncio.Future):
    """The future a group of evidence rows shares: a request that is cancelled
    while it waits (its client went away) must not cancel the others' (a task
    cancelled while it awaits this future is cancelled when the future is done)."""

    def cancel(self, msg=None):
        return False


class GroupCommit:
    """Group commit of boot evidence: :meth:`add` queues a row and returns a
    future that is resolved once the row is written (with its id when asked).
    A subclass writes a batch: :meth:`_write` (in the writer thread) returns
    the ids of the rows asked for with them; :meth:`_write_inline` may write a
    batch on the event loop instead (None: it could not)."""

    what = "boot evidence rows"  # in the error line of a failed write

    def __init__(self, batch_size, batch_wait, log_rows=False):
        self.batch_size = batch_size
        self.batch_wait = batch_wait
        self.log_rows = log_rows
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "boot-evidence")
        self._queue = []  # groups of rows: (future, [row, ...], with_id)
        self._busy = False
        self._timer = None
        self._loop = None  # the event loop of the first add
        self._idle = asyncio.Event()
        self._idle.set()
        self.batches = 0
        self.inline_batches = 0
        self.rows = 0

    def add(self, row, with_id=False):
        """A future resolved once ``row`` is committed (to its id ``with_id``).

        Rows without an id wait in groups of up to ``batch_size`` that share one
        future (in a storm, thousands a second: a future and a callback each
        cost the event loop more than the row's write); a row with its id has a
        group of its own. A batch takes whole groups, so a group is committed,
        or fails, in one write.
        """
        queue = self._queue
        if not with_id and queue:
            group = queue[-1]
            if not group[2] and len(group[1]) < self.batch_size:
                group[1].append(row)
                return group[0]
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
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
            try:
                ids = self._write_inline(rows)
            except Exception as exc:
                self._answer(batch, None, exc)
                continue
            if ids is not None:
                self.inline_batches += 1
                self._answer(batch, ids, None)
                continue
            self._loop.run_in_executor(self._executor, self._write, rows).add_done_callback(
                functools.partial(self._written, batch))
            self._busy = True
        if not self._queue and not self._busy and self._timer is None:
            self._idle.set()

    def _write_inline(self, rows):
        """Write ``rows`` on the event loop if that is cheap now: their ids as
        :meth:`_write` gives them, or None (then the writer thread writes)."""
        return None

    def _write(self, rows):
        """Write ``rows`` ([(row, with_id)]); the ids of those with_id, in order."""
        raise NotImplementedError

    def _written(self, batch, done):
        self._busy = False
        exc = done.exception()
        self._answer(batch, None if exc is not None else done.result(), exc)
        self._flush()  # what queued during this commit: the next batch, now

    def _answer(self, batch, ids, exc):
        rows = sum(len(group) for _, group, _ in batch)
        if exc is not None:
            LOG.error("cannot record %d %s: %s: %s", rows, self.what,
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

    def start(self):
        """Called on the event loop before the first request."""
        self._loop = asyncio.get_running_loop()

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
        self._closing()
        self._executor.shutdown(wait=True)

    def _closing(self):
        """Queue what the writer thread is to do before it stops."""

    def summary(self):
        """The line logged at stop."""
        return (f"boot evidence committed: {self.rows} rows in {self.batches} transactions "
                f"({self.inline_batches} of them on the event loop)")


class EvidenceWriter(GroupCommit):
    """Group commit of boot evidence into the database.

    On SQLite a batch is committed on the event loop itself when the database's
    write lock is free at that moment (a few rows cost well under a millisecond
    there, and a hand-over to a thread and back costs more than that in a
    storm: each way waits for the GIL), else by the writer thread, which waits
    for the lock. The inline commits leave the WAL's checkpoints to that thread
    (:data:`CHECKPOINT_INTERVAL`). On PostgreSQL every batch goes to the
    thread (a commit is a round trip)."""

    CHECKPOINT_INTERVAL = 1.0  # seconds between checkpoints while commits are inline

    def __init__(self, services, batch_size, batch_wait, log_rows=False):
        super().__init__(batch_size, batch_wait, log_rows)
        self.services = services
        self.max_unverified = services.conf.artifacts.max_unverified_evidence
        self._inline = services.db.is_sqlite
        self._checkpoint_at = None  # when the WAL is to be checkpointed next

    def _write_inline(self, rows):
        if not self._inline:
            return None
        ids = self._write(rows, nowait=True)
        if ids is not None:
            self._checkpoint_soon()
        return ids

    def _write(self, rows, nowait=False):
        """The ids of the rows asked for with them (a list); None when ``nowait``
        and the database's write lock is taken."""
        with self.services.transactions.now(core=True, nowait=nowait) as unit:
            if unit is None:
                return None
            conn = unit.session
            artifacts.insert_evidence(conn, [row for row, with_id in rows if not with_id])
            ids = artifacts.insert_evidence(
                conn, [row for row, with_id in rows if with_id], with_ids=True) or []
            artifacts.prune_unverified(conn, [row for row, _ in rows], self.max_unverified)
            return ids

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

    def _closing(self):
        if self._checkpoint_at is not None:
            self._executor.submit(self._checkpoint)
