"""Group commit: many small write transactions of many threads, committed as one.

Hundreds of machines in flight each persist a step's outcome in a transaction
of two or three statements; one transaction each spends more on BEGIN, COMMIT
and handing the write lock from thread to thread than on the statements. A
single writer thread takes whatever work is queued, runs it in one
transaction, commits once and then wakes every caller with its result: a
caller returns only after its writes are committed, as before.

Work that is cheaper done for many at once (a step transition: one UPDATE for
every machine that finished the same step) is queued as :class:`Batched`: the
items of one batch that share its ``many`` function are handed to it together.

If one piece of work raises, the batch is rolled back, that caller gets the
error and the others are run again each in a transaction of its own (a
failing ``many`` call is re-run item by item, so only the failing item's
caller gets the error); if the database fails (connecting, committing), every
caller of the batch gets it.
"""

import dataclasses
import logging
import queue
import threading

from metalboot_framework.daemon_thread import DaemonThread

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Batched:
    """One item of work done together with the batch's other items of the same
    ``many``: ``many(conn, items)`` returns one result per item, in order."""

    many: object
    item: object


_CALLBACKS = threading.Lock()  # orders add_done_callback against a result set


class Outcome:
    """What one caller's work came to, once its batch committed: the part of
    :class:`concurrent.futures.Future` the group commit needs (``result``,
    ``done``, ``add_done_callback``), on one bare lock held until it is set.
    A Future makes a Condition with an RLock of its own for each caller: work
    in the GIL on every write, for what one lock does."""

    __slots__ = ("_set", "_value", "_error", "_callbacks", "_done")

    def __init__(self):
        self._set = threading.Lock()
        self._set.acquire()
        self._value = self._error = self._callbacks = None
        self._done = False

    def done(self):
        return self._done

    def result(self):
        """The result once set (waiting for it), or the exception raised."""
        if not self._done:
            with self._set:  # released when set; given back for other waiters
                pass
        if self._error is not None:
            raise self._error
        return self._value

    def add_done_callback(self, fn):
        """``fn(outcome)`` once set: in the thread that sets it, or here if set."""
        with _CALLBACKS:
            if not self._done:
                self._callbacks = (self._callbacks or []) + [fn]
                return
        fn(self)

    def set_result(self, value):
        self._value = value
        self._finish()

    def set_exception(self, exc):
        self._error = exc
        self._finish()

    def _finish(self):
        with _CALLBACKS:
            self._done = True
            callbacks = self._callbacks
        self._set.release()
        for fn in callbacks or ():
            try:
                fn(self)
            except Exception:
                LOG.exception("a callback of a group commit's outcome failed")


class GroupCommitter:
    """Runs ``work(conn)`` callables in shared write transactions of ``connect()``."""

    def __init__(self, connect, finish=None, committed=None, max_batch=256,
                 name="group-commit"):
        self._connect = connect  # () -> context manager yielding a connection in a txn
        self._finish = finish  # (conn, results) -> None, last in every transaction
        # (results) -> None, in this thread after each commit, before any caller
        # hears of it: what must follow commits in their order (the announcer)
        self._committed = committed
        self._queue = queue.SimpleQueue()
        self._max_batch = max_batch
        self._thread = DaemonThread(self._loop, name)

    def run(self, work):
        """Run ``work(conn)`` (or a :class:`Batched` item) in a write transaction;
        its result once committed."""
        return self.submit(work).result()

    def submit(self, work):
        """Queue ``work`` like :meth:`run`; its :class:`Outcome`, without waiting."""
        if self._thread.is_current():
            # The batch holds the write transaction (on SQLite the process's write
            # lock): a second one from here would wait for itself.
            raise RuntimeError("a grouped write must not start another write")
        future = Outcome()
        self._queue.put((work, future))
        self._thread.ensure()
        return future

    def _loop(self):
        while True:
            batch = [self._queue.get()]
            while len(batch) < self._max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._commit(batch)
            except BaseException as exc:  # no caller may wait forever
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                raise

    def _commit(self, batch):
        failed = None  # indexes of the work that raised, if it was work
        try:
            with self._connect() as conn:
                results = [None] * len(batch)
                groups = {}  # many -> indexes of its items in the batch
                for index, (work, _) in enumerate(batch):
                    if isinstance(work, Batched):
                        groups.setdefault(work.many, []).append(index)
                    else:
                        failed = (index,)
                        results[index] = work(conn)
                for many, indexes in groups.items():
                    failed = indexes
                    out = many(conn, [batch[i][0].item for i in indexes])
                    for index, result in zip(indexes, out, strict=True):
                        results[index] = result
                failed = None
                if self._finish is not None:
                    self._finish(conn, results)
        except Exception as exc:
            if failed is None or len(batch) == 1:
                # the database itself failed (connect, commit): every caller learns it
                for _, future in batch:
                    future.set_exception(exc)
                return
            LOG.debug("a write of a batch of %d failed; running them one by one", len(batch))
            if len(failed) == 1:
                batch[failed[0]][1].set_exception(exc)
            for index, item in enumerate(batch):
                if len(failed) > 1 or index != failed[0]:
                    self._commit([item])
            return
        if self._committed is not None:
            try:
                self._committed(results)
            except Exception:
                LOG.exception("what follows a commit failed; the batch is committed")
        for (_, future), result in zip(batch, results, strict=True):
            future.set_result(result)
