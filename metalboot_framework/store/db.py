"""Engine, sessions and schema upgrades.

SQLite gets WAL, a busy timeout, and writes that take the write lock at BEGIN
(BEGIN IMMEDIATE), so that a read-then-write transaction waits for another
writer instead of failing with "database is locked". Reads use a second engine
with ordinary deferred transactions so they never queue behind writers.

SQLite's writers queue on one lock (:mod:`.write_lock`) rather than in
SQLite's busy handler.
"""

import contextlib
import logging
import os

import alembic.command
import alembic.config
import sqlalchemy
from sqlalchemy import event as sa_event
from sqlalchemy.orm import sessionmaker

from metalboot_framework.store.write_lock import WriteLock

LOG = logging.getLogger(__name__)

SCHEMA_DIR = os.path.join(os.path.dirname(__file__), "schema")
BUSY_TIMEOUT_MS = 60000  # SQLite: how long a writer waits for the write lock
WAL_AUTOCHECKPOINT = 1000  # SQLite's default: pages in the WAL before a commit checkpoints


@contextlib.contextmanager
def _without_waits(conn):
    """SQLite: ``conn`` with a busy timeout of 0 and no automatic checkpoint at
    commit; the usual settings again afterwards (the connection goes back to
    the pool)."""
    raw = conn.connection.driver_connection
    try:
        raw.execute("PRAGMA busy_timeout=0")
        raw.execute("PRAGMA wal_autocheckpoint=0")
        yield
    finally:
        try:
            raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            raw.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
        except Exception:  # a broken connection: not back into the pool as it is
            conn.invalidate()


class Database:
    def __init__(self, url, pool_size=10):
        self.url = sqlalchemy.engine.make_url(url)
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        self.pool_size = pool_size
        if self.is_sqlite:
            if self.url.database and self.url.database != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(self.url.database)),
                            exist_ok=True)
            self.write_engine = self._sqlite_engine(immediate=True)
            self.read_engine = self._sqlite_engine(immediate=False)
        else:
            self.write_engine = sqlalchemy.create_engine(
                self.url, pool_size=pool_size, max_overflow=pool_size * 2,
                pool_pre_ping=True)
            self.read_engine = self.write_engine
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)
        # SQLite: writers queue here (threads and processes); None on PostgreSQL
        self._write_lock = None
        if self.is_sqlite:
            in_memory = not self.url.database or self.url.database == ":memory:"
            self._write_lock = WriteLock(
                None if in_memory else os.path.abspath(self.url.database) + ".write-lock")
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)

    def _sqlite_engine(self, immediate):
        # Keep connections open: the conductor's workers and the API's threads
        # use many at once, and each new one costs its PRAGMAs.
        engine = sqlalchemy.create_engine(
            self.url,
            # prepared statements kept per connection: IN lists of every length
            # are statements of their own
            connect_args={"check_same_thread": False, "timeout": 60,
                          "cached_statements": 1024},
            poolclass=sqlalchemy.pool.QueuePool, pool_size=self.pool_size,
            max_overflow=self.pool_size * 4)

        @sa_event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cur.close()

        @sa_event.listens_for(engine, "begin")
        def _on_begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    def _writer(self, blocking=True):
        """Queue for SQLite's write lock: a context that yields whether this
        writer holds it (always when ``blocking``; on PostgreSQL always)."""
        if self._write_lock is None:
            return contextlib.nullcontext(True)
        return self._write_lock.hold(blocking)

    @contextlib.contextmanager
    def write(self):
        """A session in a transaction that commits on success."""
        with self._writer(), self._write.begin() as session:
            yield session

    @contextlib.contextmanager
    def read(self):
        with self._read() as session:
            yield session

    @contextlib.contextmanager
    def write_conn(self):
        """A Core connection in a write transaction: for hot paths, where an ORM
        session's bookkeeping costs more than the statements."""
        with self._writer(), self.write_engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def write_conn_nowait(self):
        """SQLite: a Core connection in a write transaction if the write lock is
        free at this moment, else None -- for an event loop, which must not wait.

        Neither its BEGIN nor its commit waits: the busy timeout is 0 for it (a
        writer outside our lock that holds SQLite's lock also gives None), and
        its commit does not checkpoint the WAL (an automatic checkpoint writes
        and syncs the database file in the committing thread): call
        :meth:`checkpoint` in a thread now and then. None on PostgreSQL."""
        if not self.is_sqlite:
            yield None
            return
        with self._writer(blocking=False) as held:
            if not held:
                yield None
                return
            with self.write_engine.connect() as conn, _without_waits(conn):
                try:
                    transaction = conn.begin()
                except sqlalchemy.exc.OperationalError:  # locked outside our lock
                    transaction = None
                if transaction is None:
                    yield None
                else:
                    with transaction:
                        yield conn

    def checkpoint(self):
        """SQLite: copy the WAL into the database without blocking any writer
        (a PASSIVE checkpoint); what :meth:`write_conn_nowait` leaves undone."""
        if self.is_sqlite:
            with self.write_engine.connect() as conn:
                # the driver's own: outside a transaction, which SQLAlchemy's
                # would begin (a checkpoint cannot run in one)
                conn.connection.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @contextlib.contextmanager
    def read_conn(self):
        with self.read_engine.connect() as conn:
            yield conn

    def alembic_config(self, connection, password_key=None):
        cfg = alembic.config.Config()
        cfg.set_main_option("script_location", SCHEMA_DIR)
        cfg.attributes["connection"] = connection
        # the revision that seals stored BMC passwords needs the key
        cfg.attributes["password_key"] = password_key
        return cfg

    def upgrade(self, revision="head", password_key=None):
        """Upgrade the schema; ``password_key`` (a
        :class:`~metalboot_framework.store.password_key.PasswordKey`) is needed
        where stored BMC passwords are still to be sealed."""
        with self.write_engine.connect() as connection:
            alembic.command.upgrade(self.alembic_config(connection, password_key), revision)
            connection.commit()
        self.checkpoint()  # what the upgrade rewrote, into the database file now

    def current_revision(self):
        from alembic.runtime.migration import MigrationContext
        with self.read_engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()

    def dispose(self):
        if self._write_lock is not None:
            self._write_lock.close()
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()
