"""BMC passwords sealed at rest with a key the database does not hold.

``machines.bmc_password`` holds Fernet tokens (AES-128-CBC and HMAC-SHA256,
the ``cryptography`` package): a dump or a backup of the database alone
reveals no password. The key is a file (``[database] bmc_password_key_file``,
mode 0600), created at the first start; every process that opens the
database (API, conductor, boot server, metalboot-dbsync) needs the same file.

The file holds one key per line, the newest first: the first seals, all of
them open. :func:`rotate` adds a new key in front, seals every row again with
it and only then drops the old ones, so a rotation killed at any moment
leaves every password readable (run it again to finish). A process that
meets a token its keys cannot open reads the file again, and one that seals
checks first whether the file changed: servers keep running through a
rotation.

The ``settings`` row :data:`CHECK_SETTING` holds a token sealed with the
current key: a process started with a key file that does not open it (a
wrong or lost file) refuses to start instead of failing on every BMC call.
"""

import contextlib
import logging
import os
import tempfile
import threading

import sqlalchemy
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from metalboot_framework.store import models

LOG = logging.getLogger(__name__)

CHECK_SETTING = "bmc_password_key_check"
_CHECK_TEXT = "metalboot bmc password key"
_M = models.Machine.__table__
_SETTINGS = models.Setting.__table__
_BATCH = 500


class PasswordKeyError(Exception):
    """The key file is missing, unreadable or not the database's key."""


def _read_keys(path):
    with open(path, encoding="ascii") as f:
        lines = [line.strip() for line in f]
    keys = [line for line in lines if line and not line.startswith("#")]
    if not keys:
        raise PasswordKeyError(f"{path} holds no key")
    try:
        return [Fernet(key) for key in keys], keys
    except ValueError as exc:
        raise PasswordKeyError(f"{path}: not a Fernet key ({exc})") from None


def _write_keys(path, keys, replace=True):
    """Write the key file at once (a reader sees the old or the new file).
    ``replace`` False: only if there is none yet; whether it was written."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bmc-password-key.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write("# metalboot BMC password keys, newest first (metalboot-dbsync "
                    "rotate-key)\n")
            f.write("".join(f"{key}\n" for key in keys))
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if another process made one first
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


class PasswordKey:
    """The keys of one key file: :meth:`seal` and :meth:`open` passwords."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._load()

    def _stat(self):
        st = os.stat(self.path)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self):
        stamp = self._stat()
        fernets, keys = _read_keys(self.path)
        self._keys, self._fernet, self._stamp = keys, MultiFernet(fernets), stamp

    def _reload_if_changed(self):
        """Read the file again if it changed since; whether it did."""
        with self._lock:
            try:
                if self._stat() == self._stamp:
                    return False
                self._load()
            except (OSError, PasswordKeyError) as exc:
                LOG.error("cannot read the BMC password key file %s again: %s "
                          "(keeping the keys read before)", self.path, exc)
                return False
        return True

    @property
    def key_count(self):
        return len(self._keys)

    def seal(self, password):
        """The token stored for ``password`` (None stays None)."""
        return self.seal_many([password])[0]

    def seal_many(self, passwords):
        """:meth:`seal` of each of ``passwords``, the key file looked at once
        (a registration of thousands of machines in one transaction)."""
        self._reload_if_changed()  # a rotation may have added a key
        fernet = self._fernet
        return [None if password is None else
                fernet.encrypt(password.encode("utf-8")).decode("ascii")
                for password in passwords]

    def open(self, sealed):
        """The password of a stored token (None stays None)."""
        if sealed is None:
            return None
        try:
            return self._fernet.decrypt(sealed).decode("utf-8")
        except InvalidToken:
            if not self._reload_if_changed():  # sealed since with a newer key?
                raise
        return self._fernet.decrypt(sealed).decode("utf-8")

    def opens_with_newest(self, sealed):
        """Whether the newest key alone opens ``sealed``."""
        try:
            Fernet(self._keys[0]).decrypt(sealed)
        except InvalidToken:
            return False
        return True

    def reseal(self, sealed):
        """``sealed`` sealed again with the newest key."""
        return self._fernet.rotate(sealed).decode("ascii")

    # -- the file -----------------------------------------------------------
    def add_newest(self):
        """Put a new key in front of the file; the old ones still open."""
        with self._lock:
            _write_keys(self.path, [Fernet.generate_key().decode("ascii")] + self._keys)
            self._load()

    def drop_old(self):
        """Keep only the newest key in the file."""
        with self._lock:
            _write_keys(self.path, self._keys[:1])
            self._load()


def _check_token(conn):
    if not sqlalchemy.inspect(conn).has_table("settings"):  # a new database
        return None
    return conn.execute(sqlalchemy.select(_SETTINGS.c.value)
                        .where(_SETTINGS.c.key == CHECK_SETTING)).scalar()


def load(path, db):
    """The key of ``path``; a new key file if there is none and the database
    has never sealed a password with another one."""
    if not os.path.exists(path):
        with db.read_conn() as conn:
            if _check_token(conn) is not None:
                raise PasswordKeyError(
                    f"the BMC password key file {path} is missing, but the database's "
                    "passwords are sealed with a key: restore the key file from the "
                    "backup made with the database (or from another metalboot host)")
        _create(path)
    try:
        return PasswordKey(path)
    except OSError as exc:
        raise PasswordKeyError(f"cannot read the BMC password key file {path}: "
                        f"{exc.strerror}") from None


def _create(path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if _write_keys(path, [Fernet.generate_key().decode("ascii")], replace=False):
        LOG.warning("created the BMC password key file %s: back it up with the database, "
                    "whose BMC passwords cannot be read without it", path)


def check(key, db):
    """Refuse a key that does not open the database's passwords; record the
    key of a database that has none yet."""
    with db.write_conn() as conn:
        token = _check_token(conn)
        if token is None:
            conn.execute(_SETTINGS.insert().values(key=CHECK_SETTING,
                                                   value=key.seal(_CHECK_TEXT)))
            return
        try:
            key.open(token)
        except InvalidToken:
            raise PasswordKeyError(
                f"the BMC password key file {key.path} does not open the database's "
                "passwords (they were sealed with another key): put the key file that "
                "was backed up with this database there") from None


def _seal_batch(conn, key, after):
    """Seal the stored passwords of up to a batch of machines with ids after
    ``after`` again with the newest key, those it does not open yet. Each row
    is written only if it still holds what was read (a concurrent change
    wins). (rows written, last id read or None when there are no more)."""
    rows = conn.execute(sqlalchemy.select(_M.c.id, _M.c.bmc_password)
                        .where(_M.c.bmc_password.isnot(None), _M.c.id > after)
                        .order_by(_M.c.id).limit(_BATCH)).all()
    written = 0
    for row in rows:
        if not key.opens_with_newest(row.bmc_password):
            written += conn.execute(
                _M.update().where(_M.c.id == row.id, _M.c.bmc_password == row.bmc_password)
                .values(bmc_password=key.reseal(row.bmc_password))).rowcount
    return written, (rows[-1].id if rows else None)


def rotate(key, db):
    """Seal every password with a new key and retire the old ones.

    Crash-safe: the old keys stay in the file until every row opens with the
    new one; a rotation run again after a crash adds one more key and
    finishes. The number of passwords sealed again."""
    key.add_newest()
    written, after = 0, ""
    while after is not None:  # a transaction per batch: writers are not held up
        with db.write_conn() as conn:
            count, after = _seal_batch(conn, key, after)
        written += count
    with db.write_conn() as conn:
        # The last pass holds off every writer (SQLite: this is its write
        # transaction; PostgreSQL: a table lock that waits for those in
        # progress): a writer that sealed with a key read before the new one
        # was added has committed by now, and is sealed again here.
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("LOCK TABLE machines IN EXCLUSIVE MODE")
        after = ""
        while after is not None:
            count, after = _seal_batch(conn, key, after)
            written += count
        if conn.execute(_SETTINGS.update().where(_SETTINGS.c.key == CHECK_SETTING)
                        .values(value=key.seal(_CHECK_TEXT))).rowcount == 0:
            conn.execute(_SETTINGS.insert().values(key=CHECK_SETTING,
                                                   value=key.seal(_CHECK_TEXT)))
    key.drop_old()
    return written
