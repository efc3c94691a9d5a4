"""The demo's child processes: started on free ports, stopped for sure."""

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time

import requests

from metalboot_framework.cli.client import CliError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Terminated(Exception):
    """SIGTERM arrived: leave like Ctrl-C, through the clean-up."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child, before exec: get SIGTERM when the demo dies, even by SIGKILL."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _terminate(signum, frame):
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up
    raise Terminated()


@contextlib.contextmanager
def stop_signals_raise_terminated():
    """SIGTERM, SIGINT and SIGHUP raise Terminated inside; the old handlers come back after.

    Explicit handlers: a demo started in the background inherits SIGINT ignored.
    """
    previous = {sig: signal.signal(sig, _terminate) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Children:
    """The processes the demo started; stopped in reverse order, for sure."""

    def __init__(self):
        self.procs = []  # (name, Popen, log file)

    def start(self, name, argv, log_path, env=None):
        log = open(log_path, "ab")
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True,  # Ctrl-C reaches only the demo
                                    preexec_fn=_die_with_parent if sys.platform == "linux"
                                    else None)
        except BaseException:
            log.close()
            raise
        self.procs.append((name, proc, log))
        return proc

    def all_alive(self):
        return all(proc.poll() is None for _, proc, _ in self.procs)

    def dead(self):
        """The names of the children that have exited."""
        return [name for name, proc, _ in self.procs if proc.poll() is not None]

    def stop_all(self, timeout=10):
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                try:
                    proc.terminate()
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for _, proc, log in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()
        self.procs = []


def wait_http(url, proc, what, log_path, timeout=45):
    """Returns once ``url`` answers 200; CliError naming the log if ``proc`` dies or is slow."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CliError(f"{what} exited with {proc.returncode}; see {log_path}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise CliError(f"{what} did not answer {url} within {timeout} s; see {log_path}")
