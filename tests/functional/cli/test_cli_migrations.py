"""``metalboot migrations`` against a real server with simulated boots (fake_autoboot)."""

import json
import time

import pytest

from tests.functional.cli.conftest import assert_one_line_error, machine_body

pytestmark = pytest.mark.functional

AUTOBOOT = {"fake_autoboot": True}


def register(server, *bodies):
    if server.request("GET", "/v1/partitions/p1").status_code == 404:
        assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    return server.register_enrolled(list(bodies))


def create(mb, ids, *extra):
    args = ["migrations", "create", "--to", "fake-alt", "-o", "json"]
    for mid in ids:
        args += ["--machine", mid]
    r = mb(*args, *extra)
    assert r.code == 0, r
    return json.loads(r.out)


def test_watch_until_done_exit_0_plain_lines(mb, server):
    ids = register(server, *(machine_body(i, properties=AUTOBOOT) for i in range(3)))
    migration = create(mb, ids, "--max-parallel", "2")
    assert migration["state"] == "running" and migration["total"] == 3
    r = mb("migrations", "watch", migration["id"], "--interval", "0.2", "--timeout", "60")
    assert r.code == 0, r
    assert "\x1b" not in r.out  # not a terminal: plain lines, no redrawing
    lines = r.out.splitlines()
    assert all(migration["id"] in line for line in lines)
    assert lines[-1].startswith(f"migration {migration['id']} done, succeeded: done 3"), r
    # the progress line of the final poll, then the summary
    assert lines[-2].endswith(f"migration {migration['id']} done, succeeded 100%: done 3; "
                              f"3/3 machines finished"), r
    for mid in ids:
        assert server.request("GET", f"/v1/machines/{mid}").json()["boot_interface"] == \
            "fake-alt"


def test_create_watch_json_is_parseable(mb, server):
    ids = register(server, machine_body(1, properties=AUTOBOOT))
    r = mb("migrations", "create", "--machine", ids[0], "--to", "fake-alt", "--watch",
           "-o", "json")
    assert r.code == 0, r
    final = json.loads(r.out)
    assert final["state"] == "done" and final["counts"] == {"done": 1}
    assert final["failed_machines"] == []


def test_watch_failed_migration_exit_1_names_the_machine(mb, server):
    ok = machine_body(1, properties=AUTOBOOT)
    bad = machine_body(2, properties={"fake_fail": {"prepare": "disk full"}})
    ids = register(server, ok, bad)
    migration = create(mb, ids)
    r = mb("migrations", "watch", migration["id"], "--interval", "0.2", "--timeout", "60")
    assert r.code == 1, r
    assert f"{bad['id']}: rolled_back: fake-alt prepare: " in r.out and "disk full" in r.out
    assert ok["id"] + ":" not in r.out  # only failed machines are listed
    assert f"migration {migration['id']} done, partially failed (1 of 2 machines failed): " \
        "done 1, rolled_back 1" in r.out, r
    r = mb("migrations", "show", migration["id"], "--machines", "-o", "json")
    shown = json.loads(r.out)
    per = {m["machine_id"]: m["state"] for m in shown["machines"]}
    assert per == {ok["id"]: "done", bad["id"]: "rolled_back"}
    assert (shown["state"], shown["result"], shown["failed"]) == ("done", "partially_failed", 1)
    r = mb("migrations", "show", migration["id"])
    assert "state                 done, partially failed (1 of 2 machines failed)\n" in r.out, r
    r = mb("migrations", "list")
    assert "done, partially failed (1 of 2 machines failed)" in r.out, r
    r = mb("migrations", "list", "--result", "partially_failed", "-o", "json")
    assert [m["id"] for m in json.loads(r.out)] == [migration["id"]], r
    r = mb("migrations", "list", "--result", "failed", "-o", "json")
    assert json.loads(r.out) == [], r


def test_dry_run(mb, server):
    good = machine_body(1)
    bad = machine_body(2, properties={"fake_fail": {"validate": "unsupported"}})
    ids = register(server, good, bad)
    r = mb("migrations", "dry-run", "--machine", f"{ids[0]},{ids[1]}", "--to", "fake-alt",
           "-o", "json")
    assert r.code == 1, r
    result = json.loads(r.out)
    assert {m["machine_id"]: m["state"] for m in result["machines"]} == {
        good["id"]: "valid", bad["id"]: "invalid"}
    # nothing changed
    assert server.request("GET", f"/v1/machines/{ids[0]}").json()["boot_interface"] == "fake"
    r = mb("migrations", "dry-run", "--partition", "p1", "--from", "fake", "--to", "fake-alt")
    assert r.code == 1 and "unsupported" in r.out and "valid" in r.out, r


def test_pause_resume_cancel_and_409(mb, server):
    # never booting machines (no autoboot), one at a time: the migration stays running
    ids = register(server, *(machine_body(i) for i in range(3)))
    migration = create(mb, ids, "--max-parallel", "1", "--boot-timeout", "300")
    mid = migration["id"]
    r = mb("migrations", "create", "--machine", ids[0], "--to", "fake-alt")
    assert_one_line_error(r, 1, "HTTP 409")
    r = mb("migrations", "pause", mid)
    assert r.code == 0 and f"migration {mid}: paused" in r.out, r
    r = mb("migrations", "resume", mid, "-o", "json")
    assert r.code == 0 and json.loads(r.out)["state"] == "running", r
    r = mb("migrations", "cancel", mid)
    assert r.code == 0 and ("cancelling" in r.out or "cancelled" in r.out), r
    r = mb("migrations", "watch", mid, "--interval", "0.2", "--timeout", "60")
    assert r.code == 1 and f"migration {mid} cancelled" in r.out, r
    r = mb("migrations", "list", "-o", "json")
    assert [m["id"] for m in json.loads(r.out)] == [mid]
    r = mb("migrations", "list", "--state", "cancelled")
    assert r.code == 0 and mid in r.out and r.out.startswith("ID"), r
    assert_one_line_error(mb("migrations", "show", "no-such-migration"), 1, "HTTP 404")


def test_watch_timeout_is_exit_1(mb, server):
    ids = register(server, machine_body(1))  # never boots
    migration = create(mb, ids, "--boot-timeout", "300", "--require-boot-report")
    assert migration["options"]["require_boot_report"] is True
    start = time.monotonic()
    r = mb("migrations", "watch", migration["id"], "--interval", "0.2", "--timeout", "1")
    assert time.monotonic() - start < 20
    assert r.code == 1 and "still running after 1 s" in r.err, r
    mb("migrations", "cancel", migration["id"])


def test_events_tail_follow_sees_new_events(run, server, cli_env):
    import subprocess
    from tests.functional.cli.conftest import ADMIN, CLI
    proc = subprocess.Popen(CLI + ["--url", server.url, "--token", ADMIN, "events", "tail",
                                   "-n", "0", "--follow", "--interval", "0.1", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env)
    try:
        time.sleep(1.5)
        register(server, machine_body(7))
        deadline = time.monotonic() + 20
        seen = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(json.loads(line))
            if any(e.get("machine_id") == machine_body(7)["id"] for e in seen):
                break
        assert any(e.get("machine_id") == machine_body(7)["id"] for e in seen), seen
    finally:
        proc.terminate()
        proc.wait(10)
