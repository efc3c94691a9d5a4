"""A real PostgreSQL server for tests, started from Debian's binaries.

PostgreSQL refuses to run as root, so the cluster belongs to the ``postgres``
user (created by Debian's package), lives in a temporary directory and listens
on 127.0.0.1 at a free port with trust authentication. Each test gets a
database of its own.

Given ``netns`` (an ``ip netns add`` name), the server runs in that network
namespace and listens on ``listen`` there; the test process, outside it,
reaches it through its unix socket, which is a file.
"""

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid

import sqlalchemy

from tests.ports import free_port


def _bin(name):
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    return found[-1]


class PostgresServer:
    def __init__(self, netns=None, listen="127.0.0.1"):
        self.user = pwd.getpwnam("postgres")
        self.dir = tempfile.mkdtemp(prefix="metalboot-pg-")
        os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self.netns, self.listen = netns, listen
        self.port = 5432 if netns else free_port()  # a namespace of its own is empty
        self.admin_url = self.url("postgres")

    def url(self, database):
        """The database's URL for this process: over TCP, or in a namespace over
        the unix socket."""
        if self.netns:
            return f"postgresql+psycopg://postgres@/{database}?host={self.dir}&port={self.port}"
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *args, **kw):
        if self.netns:  # enter the namespace as root, then become postgres
            return subprocess.run(["ip", "netns", "exec", self.netns, "runuser", "-u",
                                   "postgres", "--", *args], check=True, capture_output=True,
                                  text=True, cwd=self.dir, **kw)

        def demote():
            os.setgid(self.user.pw_gid)
            os.setuid(self.user.pw_uid)
        return subprocess.run(list(args), preexec_fn=demote, check=True, capture_output=True,
                              text=True, cwd=self.dir, **kw)

    def start(self):
        self._as_postgres(_bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres",
                          "--no-sync", "-E", "UTF8")
        self._as_postgres(
            _bin("pg_ctl"), "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "start",
            "-o", f"-p {self.port} -k {self.dir} -c listen_addresses={self.listen} "
                  f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                  f"-c max_connections=400")
        engine = sqlalchemy.create_engine(self.admin_url)
        deadline = time.monotonic() + 30
        while True:
            try:
                with engine.connect():
                    break
            except sqlalchemy.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        engine.dispose()
        return self

    def create_database(self):
        name = "t_" + uuid.uuid4().hex[:12]
        engine = sqlalchemy.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine.dispose()
        return self.url(name)

    def stop(self):
        try:
            self._as_postgres(_bin("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
