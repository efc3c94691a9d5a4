"""The agent's files under ``[agent] state_dir``, written so that a crash
(SIGKILL, power loss) leaves either the old or the new content, never a mix:
a temporary file, fsync, rename over the old one, fsync of the directory."""

import json
import os


def write_atomically(path, data):
    """Replace ``path`` with ``data`` (bytes)."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    sync_directory(directory)


def sync_directory(directory):
    """fsync a directory: a file created or renamed in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path, document):
    write_atomically(path, json.dumps(document, separators=(",", ":")).encode())


def read_json(path):
    """The document in ``path``, or None if there is none (or it is unreadable:
    the agent then starts as if it had none, and says so)."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def make_dir(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path
