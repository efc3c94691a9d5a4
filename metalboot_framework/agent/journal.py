"""The agent's evidence journal: every answered fetch and boot report is
appended to a local file and fsync'ed before its answer leaves, the way the
boot server commits its evidence to the database (the same group commit:
:class:`~metalboot_framework.boot_server.evidence.GroupCommit`; rows that
queue while a write and its fsync run form the next batch).

Each record gets the next sequence number of this agent, which, with the
agent's id, is its idempotency key at the API: delivered twice, stored once.
:mod:`.delivery` sends what is not yet delivered and advances the
``delivered`` mark (a file of its own, written atomically) after the API
took it; once everything in the journal is delivered, the file is emptied.
A record whose fsync returned survives SIGKILL and power loss; a partial
last line (a write cut off by a crash, never answered) is dropped at start.

A boot report's evidence id (in its answer) is its sequence number.
"""

import json
import logging
import os
import secrets
import threading

from metalboot_framework.agent import state_files
from metalboot_framework.boot_server.evidence import GroupCommit

LOG = logging.getLogger(__name__)

JOURNAL, DELIVERED = "journal", "delivered"


def _timestamp(value):
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


class Journal(GroupCommit):
    """The journal file of ``directory``; :meth:`add` as the boot server's
    evidence sink. ``partition_of(machine_id)`` names the partition a row is
    delivered to (read on the event loop, when the row is added)."""

    what = "boot evidence rows in the journal"

    def __init__(self, directory, partition_of, batch_size=1000, batch_wait=0.0,
                 log_rows=False):
        super().__init__(batch_size, batch_wait, log_rows)
        self.directory = state_files.make_dir(directory)
        self.partition_of = partition_of
        self.path = os.path.join(self.directory, JOURNAL)
        self._mark_path = os.path.join(self.directory, DELIVERED)
        self._lock = threading.Lock()  # pending and delivered, shared with delivery
        self.arrived = threading.Condition(self._lock)
        self.pending = []  # records written, not yet delivered, by sequence
        self.delivered = 0
        self.written = 0  # the last sequence number written
        self._fd = None
        self.recovered = 0
        self._open()

    def _open(self):
        """Read the mark and the journal: what is not delivered is pending."""
        mark = state_files.read_json(self._mark_path) or {}
        self.delivered = self.written = int(mark.get("seq") or 0)
        # A journal begun anew (a new host, an emptied state directory) numbers
        # its records from 1 again: its id keeps their keys apart from those of
        # an earlier journal of the same agent id, which the API stored already.
        self.id = mark.get("journal")
        if not self.id:
            self.id = secrets.token_hex(8)
            state_files.write_json(self._mark_path, {"seq": self.delivered,
                                                     "journal": self.id})
        good = 0
        try:
            with open(self.path, "rb") as f:
                content = f.read()
        except FileNotFoundError:
            content = b""
        for line in content.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # cut off by a crash: never fsync'ed, never answered
            try:
                record = json.loads(line)
            except ValueError:
                break
            good += len(line)
            self.written = max(self.written, record["seq"])
            if record["seq"] > self.delivered:
                self.pending.append(record)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                           0o600)
        if good < len(content):
            LOG.warning("journal %s: dropping %d bytes of a record cut off by a crash",
                        self.path, len(content) - good)
            os.ftruncate(self._fd, good)
            os.fsync(self._fd)
        self.recovered = len(self.pending)
        if self.recovered:
            LOG.info("journal %s: %d records not yet delivered (sequence %d to %d)",
                     self.path, self.recovered, self.pending[0]["seq"], self.written)

    # -- the sink of the boot server ----------------------------------------------------
    def add(self, row, with_id=False):
        row["partition"] = self.partition_of(row["machine_id"])
        return super().add(row, with_id)

    def _write(self, rows):
        """Append ``rows`` with their sequence numbers, fsync; those of the rows
        asked for with_id."""
        seq = self.written
        records, ids, lines = [], [], []
        for row, with_id in rows:
            seq += 1
            record = {"seq": seq, "partition": row["partition"],
                      "machine_id": row["machine_id"], "interface": row["interface"],
                      "kind": row["kind"], "path": row["path"],
                      "client_address": row["client_address"], "data": row["data"],
                      "created_at": _timestamp(row["created_at"])}
            records.append(record)
            lines.append(json.dumps(record, separators=(",", ":")))
            if with_id:
                ids.append(seq)
        data = memoryview(("\n".join(lines) + "\n").encode())
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)
        self.written = seq
        with self._lock:
            self.pending.extend(records)
            self.arrived.notify_all()
        return ids

    # -- what the delivery reads and writes --------------------------------------------------
    def next_batch(self, size, timeout=None):
        """Up to ``size`` records not yet delivered, oldest first (waits up to
        ``timeout`` seconds for one)."""
        with self._lock:
            if not self.pending:
                self.arrived.wait(timeout)
            return self.pending[:size]

    def mark_delivered(self, seq):
        """Everything up to ``seq`` was taken by the API: write the mark, then
        let the journal be emptied once everything in it is delivered."""
        state_files.write_json(self._mark_path, {"seq": seq, "journal": self.id})
        with self._lock:
            self.delivered = seq
            self.pending = [r for r in self.pending if r["seq"] > seq]
            everything = not self.pending
        if everything:
            try:
                self._executor.submit(self._compact)
            except RuntimeError:  # the writer thread has stopped: compacted at next start
                pass

    def _compact(self):
        """In the writer thread (no write meanwhile): empty the file if all it
        holds is delivered."""
        with self._lock:
            if self.pending or self.written != self.delivered:
                return
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)

    def wake(self):
        with self._lock:
            self.arrived.notify_all()

    def pending_count(self):
        with self._lock:
            return len(self.pending)

    def _closing(self):
        self._executor.submit(os.close, self._fd)

    def summary(self):
        return (f"boot evidence journaled: {self.rows} records in {self.batches} writes; "
                f"last sequence {self.written}, delivered up to {self.delivered}")
