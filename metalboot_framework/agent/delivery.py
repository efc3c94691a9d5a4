"""Delivery of the journal's evidence to the API: a thread that posts the
records not yet delivered in batches (``POST
/v1/partitions/{p}/boot-data/evidence``, at most ``[agent]
delivery_batch_size``, each partition's records to its partition), and
advances the journal's delivered mark only after the API answered 200 for
all of them. While the API is unreachable it tries again with backoff; what
is sent twice (an answer lost on the way) the API stores once (the agent's
id and the sequence number are the key)."""

import logging
import threading

import tenacity

from metalboot_framework.agent.client import ApiError

LOG = logging.getLogger(__name__)

RETRY_MIN, RETRY_MAX = 0.1, 2.0  # seconds between tries while the API is away

_FIELDS = ("seq", "machine_id", "interface", "kind", "path", "client_address", "data",
           "created_at")


class Delivery:
    """The delivery thread of ``journal`` (a daemon: a call in progress does
    not hold up the process's exit; what it sent is sent again next time)."""

    def __init__(self, journal, client, agent_id, default_partition, batch_size=1000):
        self.journal = journal
        self.client = client
        self.agent_id = agent_id
        self.default_partition = default_partition
        self.batch_size = batch_size
        self.stored = self.duplicates = self.refused = 0
        self.failing = None  # why the last call failed, while it fails
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="agent-delivery")

    def start(self):
        self._thread.start()

    def stop(self, timeout=2.0):
        self._stop.set()
        self.journal.wake()
        self._thread.join(timeout)

    def _run(self):
        while not self._stop.is_set():
            batch = self.journal.next_batch(self.batch_size, timeout=1.0)
            if not batch:
                continue
            try:
                self._deliver(batch)
            except tenacity.RetryError:  # stopping
                return
            except Exception:
                LOG.exception("evidence delivery failed unexpectedly; trying again")
                self._stop.wait(RETRY_MAX)
                continue
            self.journal.mark_delivered(batch[-1]["seq"])

    def _deliver(self, batch):
        by_partition = {}
        for record in batch:
            by_partition.setdefault(record.get("partition") or self.default_partition,
                                    []).append({k: record[k] for k in _FIELDS})
        for partition, records in by_partition.items():
            answer = self._post(partition, records)
            self.stored += answer.get("stored", 0)
            self.duplicates += answer.get("duplicates", 0)
            if answer.get("refused"):
                self.refused += answer["refused"]
                LOG.warning("partition %s: the API refused %d evidence records (machines "
                            "no longer in the partition)", partition, answer["refused"])

    def _post(self, partition, records):
        for attempt in tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(ApiError),
                wait=tenacity.wait_exponential(multiplier=RETRY_MIN, max=RETRY_MAX),
                stop=lambda _state: self._stop.is_set(),
                sleep=self._stop.wait, before_sleep=self._failed):
            with attempt:
                answer = self.client.deliver(partition, self.agent_id, self.journal.id,
                                             records)
        if self.failing is not None:
            LOG.info("evidence delivery works again")
            self.failing = None
        return answer

    def _failed(self, state):
        exc = state.outcome.exception()
        if self.failing is None:
            LOG.warning("cannot deliver %d evidence records (journaled; delivery is tried "
                        "again until the API takes them): %s",
                        self.journal.pending_count(), exc)
        self.failing = str(exc)
