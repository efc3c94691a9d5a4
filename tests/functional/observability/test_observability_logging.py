"""The log of a real server with log_format = json: every line JSON, request ids
on API lines, migration and machine ids on step lines, no secret anywhere."""

import json
import logging

import pytest

from metalboot_framework import logs
from tests.conftest import signer_of
from tests.conftest import ADMIN, READER


def log_lines(server):
    lines = [line for line in server.log().splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"log line is not JSON: {line!r}")
    return lines, records


@pytest.mark.functional
def test_json_log_lines_request_ids_and_no_secrets(observed):
    server = observed.server
    machine_id = observed.ids[0]
    signer = signer_of(server)
    assert signer.machine_token(machine_id, 1, "fake-alt") == observed.machine_token
    wrong = "f" * 32  # the probe's wrong machine token (conftest.WRONG_TOKEN)

    lines, records = log_lines(server)
    assert len(records) > 50
    for rec in records:
        assert {"time", "level", "logger", "message"} <= set(rec), rec

    # API lines carry the request id; lines of the conductor do not
    access = [r for r in records if r["logger"] == "metalboot_framework.api.access"]
    assert access and all(r.get("request_id") for r in access)
    probe = [r for r in access if r["request_id"] == "obs-req-0001"]
    assert len(probe) == 1
    assert probe[0]["path"] == f"/v1/machines/{machine_id}" and probe[0]["status"] == 200
    evidence = [r for r in records if r["logger"] == "metalboot_framework.artifacts"]
    assert evidence and all(r.get("request_id") for r in evidence)
    assert {r["request_id"] for r in evidence} <= {r["request_id"] for r in access}

    # one INFO line per migration step, with migration and machine ids as fields
    steps = [r for r in records if r["logger"] == "metalboot_framework.conductor.steps"
             and r.get("step")]
    assert len(steps) >= 6 * 6
    assert all(r["level"] == "INFO" and r["migration_id"] and r["machine_id"] for r in steps)
    mine = [r["step"] for r in steps if r["machine_id"] == machine_id
            and r["migration_id"] == observed.finished["id"]]
    assert mine == ["validating", "preparing", "activating", "awaiting_boot", "verifying",
                    "done"]
    assert not any(r.get("request_id") for r in steps)

    # no secrets: BMC passwords, API tokens, machine tokens (in artifact URLs too)
    text = "\n".join(lines)
    tokens = {signer.machine_token(mid, 1, "fake-alt") for mid in observed.ids}
    for secret in [ADMIN, READER, wrong, *tokens,
                   *(f"bmc-secret-{i}" for i in range(len(observed.ids)))]:
        assert secret not in text, f"secret {secret[:6]}... in the log"
    fetches = [r["path"] for r in access if r["path"].startswith("/boot/")
               and r["path"].endswith("/boot.ipxe")]
    assert f"/boot/{machine_id}/fake-alt/***/boot.ipxe" in fetches
    dashboard = [r["path"] for r in access if r["path"].startswith("/dashboard?")]
    assert dashboard and set(dashboard) == {"/dashboard?token=***"}


def test_redaction_patterns():
    token = "0123456789abcdef0123456789abcdef"
    assert logs.redact(f"GET /boot/m-1/redfish-http-url/{token}/boot.ipxe 200") == \
        "GET /boot/m-1/redfish-http-url/***/boot.ipxe 200"
    assert logs.redact(f"HttpBootUri=http://[fd00::1]:6480/boot/m/i/{token}/boot.ipxe") == \
        "HttpBootUri=http://[fd00::1]:6480/boot/m/i/***/boot.ipxe"
    # routes without a token keep their segments
    assert logs.redact("/boot/mac/52:54:00:00:00:01/fake/boot.ipxe") == \
        "/boot/mac/52:54:00:00:00:01/fake/boot.ipxe"
    assert logs.redact("/boot/partitions/p1/redfish-virtual-media-ipxe/ipxe.iso") == \
        "/boot/partitions/p1/redfish-virtual-media-ipxe/ipxe.iso"
    assert logs.redact(f"kernel ... METAL_BOOT_TOKEN={token} console=ttyS0") == \
        "kernel ... METAL_BOOT_TOKEN=*** console=ttyS0"
    assert logs.redact("Authorization: Bearer abc.def-ghi") == "Authorization: Bearer ***"
    assert logs.redact("/dashboard?x=1&token=s3cret&y=2") == "/dashboard?x=1&token=***&y=2"


def test_filter_adds_request_id_and_masks():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(self.format(record))

    handler = logs.install(Keep(), "json")
    logger = logging.getLogger("metalboot_framework.test_observability")
    logger.addHandler(handler)
    logger.propagate = False
    logs.register_secret("api-token-for-the-filter-test")
    try:
        logger.warning("outside a request")
        logs.set_request_id("rid-42")
        logger.warning("token %s and url /boot/m/i/%s/x", "api-token-for-the-filter-test",
                       "t0k3n", extra={"machine_id": "m"})
        try:
            raise ValueError("secret api-token-for-the-filter-test in a traceback")
        except ValueError:
            logger.exception("failed")
    finally:
        logs.clear_request_id()
        logger.removeHandler(handler)
        logger.propagate = True
    first, second, third = (json.loads(r) for r in records)
    assert "request_id" not in first
    assert second["request_id"] == "rid-42" and second["machine_id"] == "m"
    assert second["message"] == "token *** and url /boot/m/i/***/x"
    assert "api-token-for-the-filter-test" not in third["exception"]
    assert "ValueError" in third["exception"]

    text = logs.install(Keep(), "text")
    text.addFilter(logs.ContextFilter())
    assert isinstance(text.formatter, logging.Formatter)
    assert "[%(request_id)s]" in text.formatter._fmt


def test_queued_lines_are_made_in_the_logging_thread_and_written_by_the_listener():
    """What a conductor's workers log is made whole where it is logged (request
    id, masked secrets, arguments as they were, the traceback as text) and
    written by the listener thread."""
    import io
    import threading

    written_by = []

    class Out(io.StringIO):
        def write(self, text):
            written_by.append(threading.current_thread().name)
            return super().write(text)

    out = Out()
    queued = logs.install_queued(logging.StreamHandler(out), "text")
    logger = logging.getLogger("metalboot_framework.test_queued")
    logger.addHandler(queued)
    logger.propagate = False
    logs.register_secret("api-token-for-the-queue-test")
    changing = ["before"]
    try:
        logs.set_request_id("rid-queued")
        logger.warning("args %s, token %s", changing, "api-token-for-the-queue-test")
        changing[0] = "after"  # the line keeps the value it was logged with
        logs.clear_request_id()
        try:
            raise ValueError("api-token-for-the-queue-test in a traceback")
        except ValueError:
            logger.exception("failed")
    finally:
        logs.clear_request_id()
        queued.listener.stop()  # writes what is queued, as at the process's exit
        logger.removeHandler(queued)
        logger.propagate = True
    lines = out.getvalue().splitlines()
    assert "[rid-queued]: args ['before'], token ***" in lines[0]
    assert lines[1].endswith("[-]: failed")  # (forged lines: test_api_input_hardening)
    assert lines[2] == "Traceback (most recent call last):"  # tracebacks keep their lines
    assert "ValueError: *** in a traceback" in lines
    assert "api-token-for-the-queue-test" not in out.getvalue()
    assert written_by and threading.current_thread().name not in written_by


def test_queued_lines_are_written_together_in_their_order():
    """What the listener finds queued is one write (a write per line would be a
    system call per line for a conductor logging a line per machine and step)."""
    import io

    writes = []

    class Out(io.StringIO):
        def write(self, text):
            writes.append(text)
            return super().write(text)

    out = Out()
    handler = logging.StreamHandler(out)
    handler.setLevel(logging.INFO)
    queued = logs.install_queued(handler, "text")
    logger = logging.getLogger("metalboot_framework.test_queued_together")
    logger.addHandler(queued)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        with handler.lock:  # the listener waits here with what it took first
            for n in range(1000):
                logger.info("line %d", n)
                logger.debug("below the handler's level %d", n)
    finally:
        queued.listener.stop()
        logger.removeHandler(queued)
        logger.propagate = True
    lines = out.getvalue().splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines] == [str(n) for n in range(1000)]
    assert len(writes) <= 6, len(writes)  # 2000 records, at most 512 a write
