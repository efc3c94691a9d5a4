"""Prometheus metrics: every metric object of metalboot lives here.

Two kinds:

- **Recorded in process** (histograms and counters in :data:`REGISTRY`): the
  conductor, the BMC layer, the DHCP backend loader and the API call the small
  functions below (``observe_step``, ``bmc_call``, ...); nothing else in the
  code base touches ``prometheus_client``. They count from the start of the
  process, as Prometheus counters do.
- **Computed at scrape time** from the database by :class:`DatabaseCollector`
  (machines by boot interface and state, migrations by state, machines per
  step of each live migration): a few ``GROUP BY`` queries per scrape, so the
  numbers are right whichever conductor or API process changed the rows.

``GET /metrics`` (:mod:`metalboot_framework.api.metrics`) renders both in the
Prometheus text format. Labels never carry a machine id, a URL or a token:
BMC operations are cut down to their Redfish resource and action, HTTP
requests are labelled by their route template (``/v1/machines/<machine_id>``).
"""

import contextlib
import functools
import logging
import re
import time

from prometheus_client import (CollectorRegistry, Counter, Histogram, PlatformCollector,
                               ProcessCollector)
from prometheus_client.core import GaugeMetricFamily

LOG = logging.getLogger(__name__)

#: The process-wide registry of the in-process metrics.
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_SLOW = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0,
         900.0, 1800.0)

STEP_DURATION = Histogram(
    "metalboot_migration_step_duration_seconds",
    "Time one migration step of one machine took in the conductor (claim, plugin call, "
    "persisting the outcome), by step and the migration's target boot interface.",
    ["step", "boot_interface"], buckets=_FAST + (120.0, 300.0, 600.0), registry=REGISTRY)

BOOT_EVIDENCE_LATENCY = Histogram(
    "metalboot_boot_evidence_latency_seconds",
    "Time from a machine's activation (boot override, reset) to the boot evidence that "
    "moved it on, by target boot interface.",
    ["boot_interface"], buckets=_SLOW, registry=REGISTRY)

BMC_DURATION = Histogram(
    "metalboot_bmc_request_duration_seconds",
    "Time of one attempt of a BMC operation (Redfish requests, including the session "
    "login when there is none), by operation.",
    ["operation"], buckets=_FAST, registry=REGISTRY)

BMC_ERRORS = Counter(
    "metalboot_bmc_request_errors",
    "Failed attempts of BMC operations (retried ones included), by operation and error.",
    ["operation", "error"], registry=REGISTRY)

DHCP_DURATION = Histogram(
    "metalboot_dhcp_backend_call_duration_seconds",
    "Time of one DHCP backend call (write entries, reload the server), by backend and "
    "method.", ["backend", "method"], buckets=_FAST, registry=REGISTRY)

DHCP_ERRORS = Counter(
    "metalboot_dhcp_backend_errors",
    "Failed DHCP backend calls, by backend, method and error.",
    ["backend", "method", "error"], registry=REGISTRY)

HTTP_REQUESTS = Counter(
    "metalboot_http_requests",
    "HTTP requests answered, by route template, method and status code.",
    ["endpoint", "method", "status"], registry=REGISTRY)

HTTP_DURATION = Histogram(
    "metalboot_http_request_duration_seconds",
    "Time to answer an HTTP request (until the response object exists; streaming of "
    "large artifacts not included), by route template and method.",
    ["endpoint", "method"], buckets=_FAST, registry=REGISTRY)


# -- conductor ----------------------------------------------------------------------
_STEP_CHILDREN = {}  # (step, interface) -> STEP_DURATION's child: labels() locks and looks up


def observe_step(step, boot_interface, seconds):
    key = (step, boot_interface or "unknown")
    child = _STEP_CHILDREN.get(key)
    if child is None:
        child = _STEP_CHILDREN[key] = STEP_DURATION.labels(*key)
    child.observe(max(0.0, seconds))


def observe_boot_evidence(boot_interface, activated_at, evidence_at):
    """Activation -> evidence; both naive UTC datetimes (either may be None)."""
    if activated_at is None or evidence_at is None:
        return
    seconds = (evidence_at - activated_at).total_seconds()
    BOOT_EVIDENCE_LATENCY.labels(boot_interface).observe(max(0.0, seconds))


UNVERIFIED_EVIDENCE_DROPPED = Counter(
    "metalboot_unverified_evidence_dropped_total",
    "Unverified boot evidence rows deleted to keep [artifacts] max_unverified_evidence "
    "per machine, by boot interface.",
    ["boot_interface"], registry=REGISTRY)


def unverified_evidence_dropped(boot_interface, count):
    UNVERIFIED_EVIDENCE_DROPPED.labels(boot_interface).inc(count)


# -- BMC ----------------------------------------------------------------------------
_OPERATION_CUT = re.compile(r"[=(,]")


def bmc_operation_label(operation):
    """``PATCH Boot.HttpBootUri=http://...`` -> ``PATCH Boot.HttpBootUri``: the
    resource and action only, never a URL, an address or a device id."""
    label = _OPERATION_CUT.split(str(operation), 1)[0].strip()
    return label[:80] or "unknown"


@contextlib.contextmanager
def bmc_call(operation):
    """Time one attempt of a BMC operation; count it as an error if it raises."""
    label = bmc_operation_label(operation)
    started = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        BMC_ERRORS.labels(label, type(exc).__name__).inc()
        raise
    finally:
        BMC_DURATION.labels(label).observe(time.perf_counter() - started)


# -- DHCP ---------------------------------------------------------------------------
DHCP_METHODS = ("validate", "ensure_host_entries", "remove_host_entries", "apply_host_entries",
                "list_host_entries")


def instrument_dhcp_backend(backend):
    """Wrap the public methods of one loaded backend instance with timing and error
    counting (the class, and instances made elsewhere, stay untouched)."""
    if getattr(backend, "_metalboot_instrumented", False):
        return backend
    name = backend.name or type(backend).__name__
    for method in DHCP_METHODS:
        original = getattr(backend, method, None)
        if original is None:
            continue
        setattr(backend, method, _timed_dhcp(original, name, method))
    backend._metalboot_instrumented = True
    return backend


def _timed_dhcp(fn, backend, method):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            DHCP_ERRORS.labels(backend, method, type(exc).__name__).inc()
            raise
        finally:
            DHCP_DURATION.labels(backend, method).observe(time.perf_counter() - started)
    return wrapper


# -- HTTP ---------------------------------------------------------------------------
def observe_http(endpoint, method, status, seconds):
    HTTP_REQUESTS.labels(endpoint or "unmatched", method, str(status)).inc()
    HTTP_DURATION.labels(endpoint or "unmatched", method).observe(max(0.0, seconds))


# -- scrape-time gauges from the database -------------------------------------------
class DatabaseCollector:
    """Gauges read from the database at each scrape (a handful of GROUP BY queries)."""

    def __init__(self, services):
        self.services = services

    def collect(self):
        from sqlalchemy import func, select

        from metalboot_framework import migration_states as states
        from metalboot_framework.store import models

        MM = models.MigrationMachine
        machines = GaugeMetricFamily(
            "metalboot_machines", "Machines by boot interface and state.",
            labels=["boot_interface", "state"])
        migrations = GaugeMetricFamily(
            "metalboot_migrations", "Migrations by state.", labels=["state"])
        steps = GaugeMetricFamily(
            "metalboot_migration_machines",
            "Machines per step of each live migration (running, paused, cancelling, "
            "halting).",
            labels=["migration_id", "boot_interface", "step"])
        up = GaugeMetricFamily(
            "metalboot_database_up", "1 when the scrape-time database queries succeeded.")
        started = time.perf_counter()
        try:
            with self.services.db.read() as s:
                machine_rows = s.execute(
                    select(models.Machine.boot_interface, models.Machine.state, func.count())
                    .group_by(models.Machine.boot_interface, models.Machine.state)).all()
                migration_rows = dict(s.execute(
                    select(models.Migration.state, func.count())
                    .group_by(models.Migration.state)).all())
                live = models.Migration.state.in_(states.LIVE)
                step_rows = s.execute(
                    select(MM.migration_id, models.Migration.target_boot_interface, MM.state,
                           func.count())
                    .join(models.Migration, models.Migration.id == MM.migration_id)
                    .where(live)
                    .group_by(MM.migration_id, models.Migration.target_boot_interface,
                              MM.state)).all()
        except Exception:
            LOG.exception("metrics: reading the database failed")
            up.add_metric([], 0)
            yield up
            return
        for interface, state, n in sorted(machine_rows):
            machines.add_metric([interface, state], n)
        for state in sorted(set(states.STATES) | set(migration_rows)):
            migrations.add_metric([state], migration_rows.get(state, 0))
        for migration_id, interface, state, n in sorted(step_rows):
            steps.add_metric([migration_id, interface, state], n)
        up.add_metric([], 1)
        duration = GaugeMetricFamily(
            "metalboot_metrics_database_seconds",
            "Time the scrape-time database queries of this scrape took.")
        duration.add_metric([], time.perf_counter() - started)
        yield from (machines, migrations, steps, up, duration)


class _ProcessMetrics:
    """Yields the process-wide :data:`REGISTRY` into a per-app registry."""

    def collect(self):
        yield from REGISTRY.collect()


def registry_for(services):
    """A registry with this process's metrics and the database gauges of ``services``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ProcessMetrics())
    registry.register(DatabaseCollector(services))
    return registry
