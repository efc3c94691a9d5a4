"""GET /metrics of a real server after a migration run, parsed as Prometheus text."""

import re
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from metalboot_framework import metrics
from metalboot_framework.bmc import retry as retry_mod
from metalboot_framework.bmc.client import BmcClient
from metalboot_framework.dhcp import base as dhcp_base
from metalboot_framework.exceptions import BmcConnectionError
from metalboot_framework.task import BmcInfo
from tests.conftest import READER, free_port


def samples(text):
    """{(sample name, frozenset(labels)): value} of a scrape."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scrape, name, **labels):
    return scrape.get((name, frozenset(labels.items())))


def total(scrape, name, **labels):
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in scrape.items() if n == name and want <= ls)


@pytest.mark.functional
def test_metrics_after_a_migration(observed):
    server = observed.server
    finished, live = observed.finished, observed.live
    r = server.request("GET", "/metrics", token=READER)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    scrape = samples(r.text)

    # scrape-time gauges from the database
    assert value(scrape, "metalboot_machines", boot_interface="fake-alt", state="ready") == 5
    assert value(scrape, "metalboot_machines", boot_interface="fake", state="migrating") == 1
    assert total(scrape, "metalboot_machines") == 6
    assert value(scrape, "metalboot_migrations", state="done") == 1
    assert value(scrape, "metalboot_migrations", state="running") == 1
    assert value(scrape, "metalboot_migrations", state="halted") == 0
    assert value(scrape, "metalboot_migration_machines", migration_id=live["id"],
                 boot_interface="fake-alt", step="awaiting_boot") == 1
    # a finished migration is not live: no per-step gauges for it
    assert total(scrape, "metalboot_migration_machines", migration_id=finished["id"]) == 0
    assert value(scrape, "metalboot_database_up") == 1

    # migration steps: 6 + 1 machines validated, prepared, activated; 5 verified;
    # 1 rolled back
    count = "metalboot_migration_step_duration_seconds_count"
    for step, n in (("validating", 7), ("preparing", 7), ("activating", 7), ("verifying", 5),
                    ("rolling_back", 1)):
        assert value(scrape, count, step=step, boot_interface="fake-alt") == n, step
    assert value(scrape, "metalboot_migration_step_duration_seconds_bucket", step="validating",
                 boot_interface="fake-alt", le="+Inf") == 7

    # boot evidence latency: the 5 machines that booted, each under the 2 s timeout
    assert value(scrape, "metalboot_boot_evidence_latency_seconds_count",
                 boot_interface="fake-alt") == 5
    evidence_sum = value(scrape, "metalboot_boot_evidence_latency_seconds_sum",
                         boot_interface="fake-alt")
    assert 0 < evidence_sum < 5 * 2

    # HTTP: route templates, never machine ids or tokens
    assert value(scrape, "metalboot_http_requests_total", endpoint="/v1/migrations",
                 method="POST", status="202") == 2
    assert value(scrape, "metalboot_http_requests_total", endpoint="/v1/machines",
                 method="POST", status="201") == 1
    artifact = "/boot/<machine_id>/<interface>/<token>/<name>"
    # 4 boots by fetch and the conftest's probes: one right token, one wrong
    assert value(scrape, "metalboot_http_requests_total", endpoint=artifact, method="GET",
                 status="200") == 5
    assert value(scrape, "metalboot_http_requests_total", endpoint=artifact, method="GET",
                 status="404") == 1
    assert value(scrape, "metalboot_http_requests_total",
                 endpoint="/v1/machines/<machine_id>/boot-report", method="POST",
                 status="201") == 1
    assert value(scrape, "metalboot_http_request_duration_seconds_count", endpoint=artifact,
                 method="GET") == 6
    for machine_id in observed.ids:
        assert machine_id not in r.text
    # process metrics come along
    assert value(scrape, "process_resident_memory_bytes") > 0


@pytest.mark.functional
def test_metrics_need_a_token_unless_public(observed, server_factory):
    server = observed.server
    assert requests.get(server.url + "/metrics", timeout=10).status_code == 401
    assert server.request("GET", "/metrics", token="wrong").status_code == 401
    assert server.request("GET", "/metrics").status_code == 200  # admin reads too
    public = server_factory(extra_conf="", admin_token="adm-" + "x" * 20)
    public.conf_path.write_text(public.conf_path.read_text().replace(
        "[api]\n", "[api]\nmetrics_public = true\n"))
    public.start()
    r = requests.get(public.url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert value(samples(r.text), "metalboot_migrations", state="running") == 0
    # OpenMetrics when asked for
    r = requests.get(public.url + "/metrics", timeout=10,
                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    assert r.text.rstrip().endswith("# EOF")


def test_bmc_calls_are_timed_and_errors_counted(conf):
    """The BMC layer's one choke point (BmcClient.run) records every attempt,
    labelled by operation without URL or address."""
    port = free_port()  # nothing listens there
    client = BmcClient(conf, BmcInfo(address=f"127.0.0.1:{port}", username="root",
                                     password="bmc-pw-metrics", verify_tls=False),
                       policy=retry_mod.Policy(attempts=2, interval=0.01, max_interval=0.01))
    operation = ("PATCH Boot.BootSourceOverrideTarget=UefiHttp, "
                 "Boot.HttpBootUri=http://h/boot/m/i/0123456789abcdef/boot.ipxe")
    label = "PATCH Boot.BootSourceOverrideTarget"
    get = metrics.REGISTRY.get_sample_value
    before = get("metalboot_bmc_request_errors_total",
                 {"operation": label, "error": "ConnectionError"}) or 0
    calls = get("metalboot_bmc_request_duration_seconds_count", {"operation": label}) or 0
    with pytest.raises(BmcConnectionError):
        client.run(operation, lambda conn: conn.root)  # the first request: refused
    assert get("metalboot_bmc_request_errors_total",
               {"operation": label, "error": "ConnectionError"}) == before + 2
    assert get("metalboot_bmc_request_duration_seconds_count", {"operation": label}) == calls + 2
    assert metrics.bmc_operation_label(
        "POST VirtualMedia.InsertMedia (Cd, Image=http://x/iso)") == \
        "POST VirtualMedia.InsertMedia"


class _Backend(dhcp_base.DhcpBackend):
    ip_versions = frozenset({4})

    def validate(self):
        return None

    def ensure_host_entries(self, machine_id, interface, entries):
        raise dhcp_base.DhcpBackendError("server gone")

    def remove_host_entries(self, machine_id, interface=None):
        return True

    def list_host_entries(self, machine_id=None):
        return []


def test_dhcp_backend_calls_are_timed_and_errors_counted(conf):
    from metalboot_framework.dhcp import loader
    backend = _Backend(conf)
    backend.name = "metrics-test"
    metrics.instrument_dhcp_backend(backend)
    metrics.instrument_dhcp_backend(backend)  # once only
    get = metrics.REGISTRY.get_sample_value
    assert backend.remove_host_entries("m1") is True
    with pytest.raises(dhcp_base.DhcpBackendError):
        backend.ensure_host_entries("m1", "pxe", [])
    labels = {"backend": "metrics-test", "method": "ensure_host_entries"}
    assert get("metalboot_dhcp_backend_call_duration_seconds_count", labels) == 1
    assert get("metalboot_dhcp_backend_errors_total",
               dict(labels, error="DhcpBackendError")) == 1
    assert get("metalboot_dhcp_backend_call_duration_seconds_count",
               {"backend": "metrics-test", "method": "remove_host_entries"}) == 1
    assert get("metalboot_dhcp_backend_errors_total",
               {"backend": "metrics-test", "method": "remove_host_entries",
                "error": "DhcpBackendError"}) is None
    # the loader instruments what it loads
    loader.clear_cache()
    try:
        assert loader.get_backend("dnsmasq", conf)._metalboot_instrumented
    finally:
        loader.clear_cache()


# What Prometheus 3 and 2 send with their default scrape protocols
# (scrape.acceptHeader in prometheus/prometheus).
PROMETHEUS_ACCEPT = {
    "3": "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
         "application/openmetrics-text;version=0.0.1;q=0.4,"
         "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
         "text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
    "2": "application/openmetrics-text;version=1.0.0,"
         "application/openmetrics-text;version=0.0.1;q=0.75,"
         "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
}


def readme_scrape_config():
    """The Prometheus scrape job the README tells an operator to use."""
    text = (Path(__file__).parents[3] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "scrape_configs" in b]
    assert len(blocks) == 1, "the README shows one Prometheus scrape configuration"
    return yaml.safe_load(blocks[0])["scrape_configs"][0]


@pytest.mark.functional
@pytest.mark.parametrize("version", sorted(PROMETHEUS_ACCEPT))
def test_prometheus_scrapes_with_the_readme_configuration(observed, tmp_path, version):
    """Scrape as Prometheus does with the README's job: the bearer token read from
    its credentials file, Prometheus' Accept header, its answer parsed by the
    parser of the content type it came back with."""
    job = readme_scrape_config()
    assert job["authorization"].get("type", "Bearer") == "Bearer"
    credentials = tmp_path / "metalboot-reader-token"
    credentials.write_text(READER + "\n")  # as an operator writes it: with a newline
    token = credentials.read_text().strip()  # Prometheus trims the file's whitespace
    r = requests.get(observed.server.url + job.get("metrics_path", "/metrics"), timeout=10,
                     headers={"Authorization": f"Bearer {token}",
                              "Accept": PROMETHEUS_ACCEPT[version],
                              "Accept-Encoding": "gzip",
                              "User-Agent": f"Prometheus/{version}.0.0",
                              "X-Prometheus-Scrape-Timeout-Seconds": "10"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(r.text)}
    migrations = {s.labels["state"]: s.value for s in families["metalboot_migrations"].samples}
    assert migrations["done"] == 1, migrations
    moved = [s.value for s in families["metalboot_machines"].samples
             if s.labels == {"boot_interface": "fake-alt", "state": "ready"}]
    assert moved == [5], families["metalboot_machines"].samples
    # a scraper that accepts only the classic text format gets that
    r = requests.get(observed.server.url + "/metrics", timeout=10,
                     headers={"Authorization": f"Bearer {token}",
                              "Accept": "text/plain;version=0.0.4"})
    assert r.headers["Content-Type"].startswith("text/plain")
    assert any(f.name == "metalboot_migrations" for f in text_string_to_metric_families(r.text))
