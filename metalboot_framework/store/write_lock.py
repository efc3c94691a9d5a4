"""The queue of SQLite writers: a thread lock, and a POSIX lock between processes.

SQLite has one writer at a time, and a writer that finds the database locked
sleeps in SQLite's busy handler, up to 100 ms at a go, however soon the lock is
free. So our writers queue instead: the threads of a process on a lock, the
processes on one database (metalboot-server, its conductor, the boot server's
workers) on a POSIX lock of ``<database>.write-lock``, which hands the database
to the next writer the moment the last one commits. The lock only orders
writers; SQLite's own locking still decides, so a writer without it (the
sqlite3 shell, a process that cannot open the file) is merely slower.
"""

import contextlib
import errno
import fcntl
import logging
import os
import threading

LOG = logging.getLogger(__name__)


class WriteLock:
    """Writers of one SQLite database queue here; ``path``: the lock file, None
    for an in-memory database (only this process writes it)."""

    def __init__(self, path):
        self._threads = threading.Lock()
        self._path = path
        self._file = None  # (pid, descriptor or None): a forked child opens its own

    @contextlib.contextmanager
    def hold(self, blocking=True):
        """Wait for the lock and hold it (yields True); not ``blocking``: yields
        False at once when another thread or process of ours writes now."""
        if not self._threads.acquire(blocking):
            yield False
            return
        try:
            fd = self._descriptor()
            if fd is not None:
                # POSIX locks belong to the process: a second Database on the same
                # file in this process is not blocked by it (no self-deadlock)
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if not blocking and exc.errno in (errno.EACCES, errno.EAGAIN):  # held
                        yield False
                        return
                    self._without_file("lock", exc)  # e.g. ENOLCK on NFS
                    os.close(fd)
                    fd = None
            try:
                yield True
            finally:
                if fd is not None:
                    fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self):
        if self._file is not None and self._file[0] == os.getpid() \
                and self._file[1] is not None:
            os.close(self._file[1])
        self._file = None

    def _without_file(self, what, exc):
        LOG.warning("cannot %s %s (%s): SQLite writers of this process wait in SQLite's "
                    "busy handler instead", what, self._path, exc.strerror)
        self._file = (os.getpid(), None)

    def _descriptor(self):
        """This process's descriptor of the lock file; None without a file or
        for one this process may not open. Called with the thread lock held."""
        if self._path is None:
            return None
        pid = os.getpid()
        if self._file is None or self._file[0] != pid:
            try:
                self._file = (pid, os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                                           0o660))
            except OSError as exc:
                self._without_file("open", exc)
        return self._file[1]
