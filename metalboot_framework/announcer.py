"""What follows a group commit -- log lines, hooks -- in commit order, off the
writer's and the machines' paths.

The group commit's writer hands each committed batch's announcements here, in
the order it committed them, and one thread makes them in that order. So a
hook hears a machine's steps in the order they were committed, whichever
thread or coroutine committed them (a worker, the scheduler moving a machine
on by its evidence, a transition nobody waited for), and neither a slow hook
nor a log line holds up the writer or a machine's next step.
"""

import logging
import queue
import threading

from metalboot_framework.daemon_thread import DaemonThread

LOG = logging.getLogger(__name__)


class Announcer:
    """Makes announcements (``(fn, args)`` pairs) in one thread, in order."""

    def __init__(self, name="announcer"):
        self._queue = queue.SimpleQueue()
        self._thread = DaemonThread(self._loop, name)

    def put(self, calls):
        """Make ``calls``, a list of ``(fn, args)``, after those put before."""
        if calls:
            self._queue.put(calls)
            self._thread.ensure()

    def flush(self, timeout=30):
        """Wait until what was put so far is announced; False on timeout."""
        done = threading.Event()
        self.put([(done.set, ())])
        return done.wait(timeout)

    def _loop(self):
        while True:
            for fn, args in self._queue.get():
                try:
                    fn(*args)
                except Exception:
                    LOG.exception("announcing a committed change failed")
