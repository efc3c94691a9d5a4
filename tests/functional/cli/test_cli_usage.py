"""The CLI without a server: usage errors, connection errors, help, config errors,
and the progress display."""

import datetime
import io
import re
import socket
import subprocess
import sys
from pathlib import Path

from metalboot_framework.cli.migrations import Display
from tests.functional.cli.conftest import assert_one_line_error, free_port


def test_help_documents_commands_and_exit_codes(run):
    r = run("--help")
    assert r.code == 0, r
    for group in ("machines", "partitions", "boot-interfaces", "migrations", "events", "demo"):
        assert group in r.out
    for line in ("3  the server could not be reached", "4  no token, unknown token"):
        assert line in r.out
    r = run("migrations", "--help")
    for command in ("create", "dry-run", "show", "list", "watch", "cancel", "pause", "resume"):
        assert command in r.out


def test_unknown_flag_is_a_usage_error(run):
    r = run("machines", "list", "--bogus")
    assert r.code == 2, r
    assert "No such option '--bogus'" in r.err and "Traceback" not in r.err


def test_bad_choice_and_missing_argument_are_usage_errors(run):
    r = run("--output", "yaml", "machines", "list")
    assert r.code == 2 and "Invalid value for '-o' / '--output'" in r.err, r
    r = run("machines", "show")
    assert r.code == 2 and "Missing argument 'MACHINE_ID'" in r.err, r
    r = run("migrations", "create", "--to", "fake-alt")
    assert r.code == 2 and "give either --machine" in r.err, r


def test_connection_refused_names_the_url(run):
    with socket.socket() as s:  # bound, not listening: refused, and nobody else's
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        r = run("machines", "list", url=url, token="x")
    line = assert_one_line_error(r, 3, url, "connection refused")
    assert line.startswith("metalboot: error: ")
    assert r.out == ""


def test_server_that_never_answers_is_exit_3(run):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()  # connections complete, nobody answers
        url = "http://127.0.0.1:%d" % s.getsockname()[1]
        r = run("--timeout", "0.5", "partitions", "list", url=url, token="x")
    assert_one_line_error(r, 3, f"no answer from {url} within 0.5 s")


def test_connection_refused_from_env_url(run):
    url = f"http://127.0.0.1:{free_port()}"
    r = run("partitions", "list", env={"METALBOOT_URL": url, "METALBOOT_TOKEN": "x"})
    assert_one_line_error(r, 3, url)


def test_missing_explicit_config_file_is_a_usage_error(run, tmp_path):
    r = run("--config", tmp_path / "nope.ini", "machines", "list")
    assert_one_line_error(r, 2, "nope.ini", "does not exist")


def test_bad_url_scheme_is_a_usage_error(run):
    r = run("machines", "list", url="127.0.0.1:6480", token="x")
    assert_one_line_error(r, 2, "must start with http://")


def test_bmc_password_is_not_accepted_on_the_command_line(run):
    r = run("machines", "register", "--id", "x", "--partition", "p1", "--bmc-password",
            "secret")
    assert r.code == 2 and "No such option '--bmc-password'" in r.err, r


def test_csv_with_unknown_column_is_refused_before_any_request(run, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("id,partition,colour\nx,p1,blue\n")
    # no server at this URL: a request would be exit 3, not 2
    r = run("machines", "import", path, url=f"http://127.0.0.1:{free_port()}", token="x")
    assert_one_line_error(r, 2, "unknown column(s) colour")


def test_cli_does_not_import_the_server():
    code = ("import sys, metalboot_framework.cli; bad = [m for m in sys.modules if "
            "m.startswith(('metalboot_framework.store', 'metalboot_framework.conductor', "
            "'metalboot_framework.api', 'sqlalchemy', 'flask'))]; print(bad); "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


MIGRATION = {"id": "m1", "boot_interface": "fake-alt", "state": "running", "total": 4,
             "progress": 0.25, "counts": {"queued": 2, "awaiting_boot": 1, "done": 1},
             "finished_at": None, "estimated_completion": None}


def test_display_redraws_bars_per_step_on_a_terminal():
    stream = io.StringIO()
    display = Display(stream, tty=True)
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=135)
    display.update(dict(MIGRATION, estimated_completion=soon.isoformat().replace(
        "+00:00", "Z")))
    first = stream.getvalue()
    assert "\x1b[2K" in first and "queued" in first and "awaiting_boot" in first
    assert first.count("\n") == 5  # header + all machines + one line per step
    # one bar of all machines, with counts and the time left
    assert re.search(r"all +\[#+-+\]  25%  1/4 machines finished, ETA 2m1[45]s", first), first
    display.update(dict(MIGRATION, counts={"done": 3, "rolled_back": 1}, progress=1.0,
                        state="done", result="partially_failed", succeeded=3, failed=1))
    second = stream.getvalue()[len(first):]
    assert second.startswith("\x1b[5F")  # back to the top of the block, then redraw
    assert "done, partially failed (1 of 4 machines failed)" in second
    assert "100%  4/4 machines finished (1 failed)" in second and "ETA" not in second
    assert "[" + "#" * 10 in second


def test_display_prints_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    display = Display(stream, tty=False)
    display.update(MIGRATION)
    display.update(MIGRATION)  # unchanged: no new line
    display.update(dict(MIGRATION, counts={"done": 4}, state="done", progress=1.0,
                        result="succeeded", succeeded=4, failed=0))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in stream.getvalue()
    assert lines[0].endswith("running 25%: queued 2, awaiting_boot 1, done 1; "
                             "1/4 machines finished")
    assert lines[1].endswith("done, succeeded 100%: done 4; 4/4 machines finished")


def test_console_script_is_installed():
    from importlib.metadata import entry_points
    scripts = entry_points(group="console_scripts", name="metalboot")
    assert [ep.value for ep in scripts] == ["metalboot_framework.cli:main"]
    proc = subprocess.run(["metalboot", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and "metalboot" in proc.stdout


def test_malformed_urls_are_usage_errors(run):
    for url, needle in (("http://127.0.0.1:1659l", "Port could not be cast"),
                        ("http://[::1", "Invalid IPv6 URL"),
                        ("http://127.0.0.1:99999", "Port out of range"),
                        ("http://h?x=1", "query")):
        assert_one_line_error(run("machines", "list", url=url, token="x"), 2, needle)


def test_import_file_not_utf8_is_a_usage_error_naming_it(run, tmp_path):
    path = tmp_path / "machines.json"
    path.write_bytes(b"\xff\xfe[{}]")
    r = run("machines", "import", path, url="http://127.0.0.1:9", token="x")
    assert_one_line_error(r, 2, str(path), "not UTF-8")


def test_demo_without_sushy_tools_says_how_to_install_it_from_a_checkout(tmp_path):
    """The package is installed from its source directory, not from an index: the
    hint must be one that works there."""
    run_without_sushy = ("import sys; sys.modules['sushy_tools'] = None; "
                         "from metalboot_framework.cli import main; "
                         "sys.argv[0] = 'metalboot'; main()")
    r = subprocess.run([sys.executable, "-c", run_without_sushy, "demo", "--interface",
                        "redfish", "--state-dir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "sushy-tools is not installed (pip install '.[demo]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_docs_name_the_demo_extra_as_it_installs_from_a_checkout():
    root = Path(__file__).parents[3]
    docs = [root / "README.md", *sorted((root / "doc").rglob("*.rst"))]
    assert not [d.name for d in docs if "metalboot[demo]" in d.read_text()]
    assert "pip install '.[demo]'" in (root / "README.md").read_text()
