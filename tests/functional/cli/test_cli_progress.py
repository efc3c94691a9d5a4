"""Progress of long CLI commands against a real server: on a terminal (a real
pseudo-terminal, as a person's shell gives) a bar with counts and the time
left; in a pipe plain lines; with -o json only the JSON."""

import json
import os
import pty
import re
import subprocess
import time

import pytest

from tests.functional.cli.conftest import ADMIN, CLI, assert_one_line_error, machine_body

pytestmark = pytest.mark.functional

COUNT = 1200


def write_csv(path, count, bad=None):
    lines = ["id,partition,mac"]
    for i in range(count):
        body = machine_body(i)
        mac = "not-a-mac" if i == bad else f"52:54:01:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:" \
                                            f"{i & 255:02x}"
        lines.append(f"{body['id']},p1,{mac}")
    path.write_text("\n".join(lines) + "\n")
    return path


def count_machines(server):
    count, marker = 0, None
    while True:
        page = server.request("GET", "/v1/machines", params=dict(
            {"limit": 1000}, **({"marker": marker} if marker else {}))).json()
        count += len(page["machines"])
        marker = page["next_marker"]
        if not marker:
            return count


def run_in_pty(argv, env, timeout=120):
    """Run ``argv`` with its stdin, stdout and stderr on a new pseudo-terminal;
    (exit code, everything it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(timeout=max(1, deadline - time.monotonic())), \
            b"".join(chunks).decode()
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_import_on_a_terminal_draws_a_bar_with_counts_and_eta(server, partition, cli_env,
                                                               tmp_path):
    path = write_csv(tmp_path / "fleet.csv", COUNT)
    code, out = run_in_pty(CLI + ["--url", server.url, "--token", ADMIN, "machines", "import",
                                  str(path)], cli_env)
    assert code == 0, out
    # redrawn in place: one line, rewritten per batch of 500
    frames = [f for f in out.split("\r\x1b[2K") if f]
    assert re.match(r"\[#+-+\]  42%  500/1200 machines registered from fleet\.csv, "
                    r"ETA \S+", frames[0]), out
    assert re.match(r"\[#+-*\]  83%  1000/1200 machines registered from fleet\.csv, "
                    r"ETA \S+", frames[1]), out
    assert re.match(r"\[#+\] 100%  1200/1200 machines registered from fleet\.csv\r?\n"
                    r"registered 1200 machine\(s\) from fleet\.csv", frames[2]), out
    assert count_machines(server) == COUNT


def test_import_in_a_pipe_prints_plain_lines_and_json_alone(mb, server, partition, tmp_path):
    path = write_csv(tmp_path / "fleet.csv", COUNT)
    r = mb("machines", "import", path, "--batch-size", "600")
    assert r.code == 0, r
    assert "\x1b" not in r.out and "\r" not in r.out
    lines = r.out.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d 600/1200 machines registered from fleet\.csv, "
                        r"ETA \S+", lines[0]), r
    assert re.fullmatch(r"\d\d:\d\d:\d\d 1200/1200 machines registered from fleet\.csv",
                        lines[1]), r
    assert lines[2:] == ["registered 1200 machine(s) from fleet.csv"], r
    other = write_csv(tmp_path / "more.csv", 0)
    other.write_text("id,partition,mac\n" + "\n".join(
        f"{machine_body(COUNT + i)['id']},p1,52:54:02:00:{i >> 8:02x}:{i & 255:02x}"
        for i in range(700)) + "\n")
    r = mb("machines", "import", other, "-o", "json")
    assert r.code == 0, r
    assert json.loads(r.out)["count"] == 700  # nothing but the JSON on stdout


def test_import_names_what_a_failed_batch_left_registered(mb, server, partition, tmp_path):
    path = write_csv(tmp_path / "fleet.csv", COUNT, bad=1100)
    r = mb("machines", "import", path)
    line = assert_one_line_error(r, 1, "HTTP 422", "batch of machines 1001-1200",
                                 "1000 registered before it, the first not registered is "
                                 "CSV line 1002", "first error at CSV line 1102")
    assert "\x1b" not in line
    assert re.search(r"1000/1200 machines registered", r.out), r
    assert count_machines(server) == 1000


def test_migration_watch_on_a_terminal_shows_counts_and_eta(server, partition, cli_env):
    ids = server.register_enrolled([machine_body(i, properties={
        "fake_autoboot": True, "fake_boot_delay": 0.6}) for i in range(6)])
    argv = CLI + ["--url", server.url, "--token", ADMIN, "migrations", "create", "--to",
                  "fake-alt", "--max-parallel", "1", "--watch"]
    for mid in ids:
        argv += ["--machine", mid]
    code, out = run_in_pty(argv, cli_env)
    assert code == 0, out
    assert "\x1b[2K" in out and re.search(r"\x1b\[\d+F", out), out  # redrawn in place
    # while it ran: the bar of all machines, how many finished, the time left
    assert re.search(r"all +\[#+-+\] +\d+%  [1-5]/6 machines finished, ETA \S+", out), out
    assert re.search(r"all +\[#+\] 100%  6/6 machines finished", out), out
    assert re.search(r"done, succeeded: done 6", out), out
