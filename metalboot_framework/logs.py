"""Log records: request ids, secrets masked, text or JSON lines.

:func:`install` (called by :func:`metalboot_framework.cmd.common.setup_logging`)
puts one :class:`ContextFilter` on the root handler, so it sees every record of
every logger (library ones included) just before it is written:

- ``record.request_id``: the id of the API request being handled by this thread
  (set by the app from ``X-Request-Id`` or generated; ``-`` outside requests);
- secrets masked in the message and the traceback: BMC passwords registered with
  :mod:`metalboot_framework.bmc.redact`, the configured API tokens, bearer
  tokens, and the per-machine token inside artifact URLs
  (``/boot/<machine>/<interface>/<token>/<name>``) and in ``METAL_BOOT_TOKEN=``.

``[DEFAULT] log_format = json`` writes one JSON object per line with ``time``,
``level``, ``logger``, ``message``, ``request_id`` (inside a request) and, where
the code passes them with ``extra=``, ``migration_id``, ``machine_id``,
``step``...
"""

import atexit
import contextvars
import datetime
import json
import logging
import logging.handlers
import queue
import re
import sys
import threading

MASK = "***"

_request_id = contextvars.ContextVar("metalboot_request_id", default=None)

# /boot/<machine_id>/<interface>/<token>/<name>; not /boot/mac/... nor
# /boot/partitions/..., which carry no token.
_ARTIFACT_TOKEN = re.compile(r"(/boot/(?!mac/|partitions/)[^/\s?#\"']+/[^/\s?#\"']+/)"
                             r"[^/\s?#\"']+(?=/)")
# A machine token where a client put it anywhere else in a boot path (a
# segment short of the artifact's, a query, a 404 path): 32 hex digits on their
# own (ids are UUIDs with dashes, request ids 16 digits).
_LOOSE_TOKEN = re.compile(r"(?<![0-9A-Za-z_-])[0-9a-f]{32}(?![0-9A-Za-z_-])")
_PATTERNS = (
    (_ARTIFACT_TOKEN, r"\1" + MASK),
    (_LOOSE_TOKEN, MASK),
    (re.compile(r"(METAL_BOOT_TOKEN=)[^\s\"'&]+"), r"\1" + MASK),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1" + MASK),
    (re.compile(r"(?i)([?&](?:token|password)=)[^&\s\"'#]+"), r"\1" + MASK),
)

# What one of the patterns above needs in the (case-folded) text: most log
# lines carry none, and four substring tests cost less than one regex search.
_TOKEN_MARKS = ("/boot", "token=", "bearer", "password=")

_secrets = frozenset()  # replaced, never changed: read without a lock
_secrets_lock = threading.Lock()


# -- request ids --------------------------------------------------------------------
def set_request_id(value):
    """Mark the records of this thread (context) with ``value``; returns a reset token."""
    return _request_id.set(value)


def clear_request_id():
    _request_id.set(None)


def current_request_id():
    return _request_id.get()


# -- secrets ------------------------------------------------------------------------
def register_secret(*values):
    """Mask these strings (API tokens...) in every log line from now on."""
    global _secrets
    with _secrets_lock:
        _secrets = _secrets | {v for v in values if v and len(v) >= 6}


def redact(text):
    """``text`` with every known secret and token-bearing pattern masked."""
    if not text:
        return text
    folded = text.casefold()  # as the patterns' (?i) matches: "ſ" is an "s" too
    if any(mark in folded for mark in _TOKEN_MARKS):
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    # BMC passwords, registered by the BMC layer (not imported here: no BMC
    # layer loaded means no password registered)
    bmc_redact = sys.modules.get("metalboot_framework.bmc.redact")
    return bmc_redact.scrub(text) if bmc_redact is not None else text


class ContextFilter(logging.Filter):
    """Adds ``request_id`` and masks secrets; attach it to handlers."""

    def filter(self, record):
        rid = _request_id.get()
        if getattr(record, "request_id", None) is None:
            record.request_id = rid or "-"
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's business
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


# -- formats ------------------------------------------------------------------------
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"

# LogRecord attributes that are not "extra" fields.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "request_id", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record):
        out = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid and rid != "-":
            out["request_id"] = rid
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in out:
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) \
                    else str(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self.formatException(record.exc_info))
        if record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(out, ensure_ascii=False, default=str)


# Line breaks and other control characters (tab aside): in a text log, a message
# that carries one from a request (a path with %0a) would forge a line of its own.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _escaped(match):
    return ascii(match.group())[1:-1]


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, one line per message: its control characters escaped
    (``\\n``, ``\\x00``); a traceback still follows on lines of its own."""

    def __init__(self):
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record):
        message = record.message
        if _CONTROL.search(message):
            record.message = _CONTROL.sub(_escaped, message)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message


def install(handler, log_format="text"):
    """Give ``handler`` the filter and the formatter of ``log_format``."""
    if not any(isinstance(f, ContextFilter) for f in handler.filters):
        handler.addFilter(ContextFilter())
    handler.setFormatter(_formatter(log_format))
    return handler


def _formatter(log_format):
    return JsonFormatter() if log_format == "json" else TextFormatter()


class QueuedHandler(logging.handlers.QueueHandler):
    """Hands a record, made whole in the logging thread (message with its
    arguments, secrets masked and request id by :class:`ContextFilter`, the
    traceback as text), to a :class:`logging.handlers.QueueListener` thread
    that formats and writes it.

    A conductor's hundreds of workers log a line per step. Written by each
    worker, a line holds the handler's lock across the write, and a worker
    that waits there for the GIL meanwhile makes all the others queue behind
    the lock. Handed over, a line costs the worker a queue's put. No lock is
    taken: the queue is thread-safe."""

    def __init__(self, records):
        super().__init__(records)
        self.addFilter(ContextFilter())  # in the logging thread: its request id

    def handle(self, record):
        passed = self.filter(record)
        if passed:
            self.emit(record)
        return passed

    def prepare(self, record):
        record.msg, record.args = record.getMessage(), None
        # ContextFilter wrote the traceback to exc_text (masked), which the
        # listener's formatter appends
        record.exc_info = None
        return record


_STOP = object()  # queued by _Listener.stop: what is queued before it is written first


class _Listener:
    """The thread that writes queued records with ``handler``: what it finds
    queued, at once -- for a plain :class:`logging.StreamHandler` one write and
    one flush for all of it: a write per line would be a system call per line,
    and each a hand-over of the GIL in a process whose conductor logs a line
    per machine and step. Records are written in the order they were queued."""

    BATCH = 512  # records at most in one write

    def __init__(self, records, handler):
        self.queue = records
        self.handlers = (handler,)
        self.stopped = False
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self._thread.start()

    def stop(self):
        """Write what is queued, then end the thread (may be called twice: by its
        owner, then at exit)."""
        if self.stopped:
            return
        self.stopped = True
        self.queue.put(_STOP)
        if self._thread is not None:
            self._thread.join()

    def _run(self):
        while True:
            batch = [self.queue.get()]
            while len(batch) < self.BATCH:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(record is _STOP for record in batch)
            self._write([record for record in batch if record is not _STOP])
            if stop:
                return

    def _write(self, records):
        handler = self.handlers[0]
        if type(handler) is not logging.StreamHandler:  # e.g. a FileHandler opens lazily
            for record in records:
                if record.levelno >= handler.level:
                    handler.handle(record)
            return
        lines = []
        for record in records:
            if record.levelno < handler.level or not handler.filter(record):
                continue
            try:
                lines.append(handler.format(record) + handler.terminator)
            except Exception:
                handler.handleError(record)
        if not lines:
            return
        with handler.lock:
            try:
                handler.stream.write("".join(lines))
                handler.flush()
            except Exception:
                handler.handleError(records[-1])


def install_queued(handler, log_format="text"):
    """A :class:`QueuedHandler` whose listener thread writes to ``handler``
    (formatted as ``log_format``); the listener writes what is queued when the
    process exits."""
    handler.filters = [f for f in handler.filters if not isinstance(f, ContextFilter)]
    handler.setFormatter(_formatter(log_format))
    records = queue.SimpleQueue()
    queued = QueuedHandler(records)
    queued.listener = _Listener(records, handler)
    queued.listener.start()
    atexit.register(queued.listener.stop)
    return queued
