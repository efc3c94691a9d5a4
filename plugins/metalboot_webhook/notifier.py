"""POST each event to ``[webhook] url``, from a background thread.

Implements the ``metalboot_event`` hook: the event is put on a bounded queue
and the caller goes on at once, so a slow or dead receiver never blocks a
migration. A sender thread POSTs events in order, as JSON, retrying with
exponential backoff (tenacity) on connection errors and 5xx answers; after
``max_attempts`` it logs the event id and moves on. When the queue is full
the oldest event is dropped and logged: the receiver can catch up from
``GET /v1/events``. Events come in the order their transactions notified,
which for two threads committing at once may differ from the feed's order;
the feed is the ordered, gap-free record.
"""

import collections
import logging
import threading

import requests
import tenacity
from oslo_config import cfg

from metalboot_framework import hookimpl

LOG = logging.getLogger(__name__)

opts = [
    cfg.URIOpt("url", schemes=["http", "https"],
               help="Where to POST events; unset: the notifier does nothing."),
    cfg.StrOpt("token", secret=True,
               help="Sent as 'Authorization: Bearer <token>' when set."),
    cfg.FloatOpt("timeout", default=5.0, min=0.1, help="Seconds per POST."),
    cfg.IntOpt("max_attempts", default=6, min=1, help="POSTs per event before giving up."),
    cfg.FloatOpt("backoff_max", default=30.0, min=0.0,
                 help="Longest wait in seconds between two attempts."),
    cfg.IntOpt("queue_size", default=10000, min=1,
               help="Events held for sending; beyond it the oldest are dropped."),
]
cfg.CONF.register_opts(opts, group="webhook")


def list_opts():
    return [("webhook", opts)]


class _Retryable(Exception):
    pass


class Notifier:
    def __init__(self, conf):
        self.conf = conf.webhook
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._thread = None
        self._session = requests.Session()
        self.sent = 0
        self.dropped = 0

    def enqueue(self, event):
        with self._cond:
            if len(self._queue) >= self.conf.queue_size:
                old = self._queue.popleft()
                self.dropped += 1
                LOG.warning("webhook queue full: dropped event %s", old.get("id"))
            self._queue.append(event)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="webhook-notifier")
                self._thread.start()
            self._cond.notify()

    def _run(self):
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                event = self._queue.popleft()
            try:
                self._send(event)
                self.sent += 1
            except Exception as exc:
                LOG.error("webhook: giving up on event %s after %d attempts: %s",
                          event.get("id"), self.conf.max_attempts, exc)

    def _send(self, event):
        headers = {"Content-Type": "application/json"}
        if self.conf.token:
            headers["Authorization"] = f"Bearer {self.conf.token}"

        @tenacity.retry(stop=tenacity.stop_after_attempt(self.conf.max_attempts),
                        wait=tenacity.wait_exponential(multiplier=0.2, max=self.conf.backoff_max),
                        retry=tenacity.retry_if_exception_type(
                            (_Retryable, requests.ConnectionError, requests.Timeout)),
                        reraise=True)
        def post():
            r = self._session.post(self.conf.url, json=event, headers=headers,
                                   timeout=self.conf.timeout)
            if r.status_code >= 500:
                raise _Retryable(f"{self.conf.url} answered {r.status_code}")
            if r.status_code >= 400:
                LOG.error("webhook %s refused event %s with %s", self.conf.url,
                          event.get("id"), r.status_code)

        post()


_notifier = None
_lock = threading.Lock()


def _get():
    global _notifier
    with _lock:
        if _notifier is None:
            _notifier = Notifier(cfg.CONF)
        return _notifier


@hookimpl
def metalboot_event(event):
    if not cfg.CONF.webhook.url:
        return
    _get().enqueue(event)
