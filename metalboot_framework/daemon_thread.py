"""A daemon thread started on first use, and started again if it died: for
the writers and announcers of a process that may never need them (an API
process, a boot server before it forks)."""

import threading


class DaemonThread:
    def __init__(self, target, name):
        self._target = target
        self._name = name
        self._thread = None
        self._lock = threading.Lock()

    def ensure(self):
        """Start the thread unless it runs."""
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._target, name=self._name,
                                                    daemon=True)
                    self._thread.start()

    def is_current(self):
        """Whether the caller runs in this thread."""
        return self._thread is not None and threading.current_thread() is self._thread
