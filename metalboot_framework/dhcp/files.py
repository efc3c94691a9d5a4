"""Small file helpers the DHCP backends share: atomic writes, directory checks, locks."""

import contextlib
import fcntl
import os
import tempfile
import threading

_THREAD_LOCKS = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def atomic_write(path, text, mode=0o644):
    """Replace ``path`` with ``text`` in one rename; readers never see half a file.

    The temporary file is a dot file in the same directory (dnsmasq's inotify
    watch ignores dot files) and gets ``mode`` before the rename, because the
    server reading it may run as another user. Returns ``False`` and leaves the
    file alone when it holds ``text`` already.
    """
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    directory, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return True


def remove_stale_temp_files(directory, prefix):
    """Remove temporary files a crashed writer left (``.<prefix>*.tmp``)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            if name.startswith("." + prefix) and name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))


def check_writable_dir(path):
    """A reason why ``path`` is not a writable directory, or ``None``."""
    if not path:
        return "is not set"
    if not os.path.isdir(path):
        return f"{path} does not exist or is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".metalboot-probe.", suffix=".tmp", dir=path)
    except OSError as exc:
        return (f"{path} is not writable by this process (uid {os.getuid()}): "
                f"{exc.strerror or exc}")
    os.close(fd)
    # A concurrent remove_stale_temp_files may have removed it already.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(probe)
    return None


@contextlib.contextmanager
def locked(lock_path):
    """Hold an exclusive lock on ``lock_path`` (threads and processes alike)."""
    with _THREAD_LOCKS_GUARD:
        tlock = _THREAD_LOCKS.setdefault(lock_path, threading.Lock())
    with tlock:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
