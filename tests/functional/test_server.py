"""A real metalboot-server process: HTTP, start-up checks, plugins as installed
distributions, clean shutdown, and no secrets in its log."""

import concurrent.futures
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import free_port, machine_body

pytestmark = pytest.mark.functional

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example_plugin_site(tmp_path_factory):
    """The example third-party plugin, pip-installed into its own directory."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target),
                    str(ROOT / "examples/metalboot-example-plugin")], check=True)
    assert list(target.glob("metalboot_example_plugin-*.dist-info"))
    return target


def test_register_over_http_and_clean_shutdown(server_factory):
    server = server_factory().start()
    r = server.request("POST", "/v1/partitions", json={"id": "p1"})
    assert r.status_code == 201
    r = server.request("POST", "/v1/machines", json=[machine_body(i) for i in range(3)])
    assert r.status_code == 201 and r.json()["count"] == 3
    assert len(server.request("GET", "/v1/machines").json()["machines"]) == 3
    assert server.request("GET", "/v1/machines").headers["Server"] == "metalboot"
    assert server.stop() == 0
    assert "metalboot-server stopped" in server.log()
    assert "Traceback" not in server.log()
    # state survives a restart
    server.start()
    assert len(server.request("GET", "/v1/machines").json()["machines"]) == 3


def test_shutdown_answers_a_waiting_long_poll_at_once(server_factory):
    """An agent's long poll of the boot data feed (up to 30 s) does not hold
    the shutdown: it is answered (no change) and every request thread ends,
    so waitress has none left to give up on."""
    server = server_factory().start()
    assert server.request("POST", "/v1/partitions", json={"id": "p1"}).status_code == 201
    r = server.request("POST", "/v1/partitions/p1/agent-tokens", json={"description": "t"})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    cursor = requests.get(server.url + "/v1/partitions/p1/boot-data", headers=headers,
                          timeout=10).json()["cursor"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(requests.get, server.url + "/v1/partitions/p1/boot-data/changes",
                              params={"since": cursor, "wait": 30}, headers=headers,
                              timeout=60)
        time.sleep(1)  # the request reaches its handler and waits there
        assert not waiting.done()
        assert server.stop() == 0
        answer = waiting.result()
    assert answer.status_code == 200, answer.text
    assert (answer.json()["cursor"], answer.json()["machines"]) == (cursor, [])
    assert "still running" not in server.log(), server.log()
    assert "metalboot-server stopped" in server.log()


def test_sigkill_and_restart_keeps_state(server_factory):
    server = server_factory().start()
    server.request("POST", "/v1/partitions", json={"id": "p1"})
    server.request("POST", "/v1/machines", json=machine_body(1))
    server.stop(sig=signal.SIGKILL)
    server.start()
    assert server.request("GET", f"/v1/machines/{machine_body(1)['id']}").status_code == 200


def test_bad_input_never_500_over_http(server_factory):
    server = server_factory().start()
    bad = [
        ("POST", "/v1/machines", {"data": b"\xff\xfe", "headers": {"Content-Type":
                                                                 "application/json"}}),
        ("POST", "/v1/machines", {"data": b"[1,2", "headers": {"Content-Type":
                                                             "application/json"}}),
        ("POST", "/v1/machines", {"json": {"id": None}}),
        ("POST", "/v1/machines", {"json": [[]]}),
        ("GET", "/v1/machines?limit=-1", {}),
        ("GET", "/v1/machines/%00", {}),
        ("PATCH", "/v1/partitions/x", {"json": {"boot": {"kernel_url": "http://[::1"}}}),
        ("PUT", "/v1/machines", {}),
        ("GET", "/v1/nowhere", {}),
    ]
    for method, path, kw in bad:
        headers = dict(server.headers(), **kw.pop("headers", {}))
        r = requests.request(method, server.url + path, headers=headers, timeout=10, **kw)
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
        assert r.json()["error"]["message"], (method, path)
    assert "Traceback" not in server.log()


def test_bmc_password_not_in_log(server_factory):
    server = server_factory(extra_conf="debug = true").start()
    server.request("POST", "/v1/partitions", json={"id": "p1"})
    server.request("POST", "/v1/machines", json=machine_body(1))
    server.request("PATCH", f"/v1/machines/{machine_body(1)['id']}",
                   json={"bmc": {"password": "another-secret"}})
    r = server.request("POST", "/v1/machines", json=dict(machine_body(2), boot_mode="x"))
    assert r.status_code == 422
    assert "bmc-secret-2" not in r.text
    server.stop()
    log = server.log()
    assert "bmc-secret-1" not in log and "another-secret" not in log and "bmc-secret-2" not in log
    assert "admin-token-for-tests" not in log


def test_unknown_plugin_stops_start_with_one_line(server_factory):
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,warp-drive")
    server.start(wait=False)
    assert server.proc.wait(30) == 1
    log = server.log()
    assert "warp-drive" in log and "not installed" in log
    assert "Traceback" not in log


def test_default_not_enabled_stops_start(server_factory):
    server = server_factory(extra_conf="default_boot_interface = pxe")
    server.start(wait=False)
    assert server.proc.wait(30) == 1
    assert "default_boot_interface 'pxe' is not in enabled_boot_interfaces" in server.log()


def test_non_loopback_without_tokens_is_refused(server_factory):
    server = server_factory(admin_token=None)
    server.conf_path.write_text(server.conf_path.read_text().replace(
        "host_ip = 127.0.0.1", "host_ip = 0.0.0.0"))
    server.start(wait=False)
    assert server.proc.wait(30) == 1
    assert "refusing to listen on 0.0.0.0" in server.log()
    assert "Traceback" not in server.log()


def test_loopback_without_tokens_generates_an_admin_token(server_factory):
    server = server_factory(admin_token=None).start()
    token = (server.state / "admin-token").read_text().strip()
    assert requests.get(server.url + "/v1/machines", timeout=5).status_code == 401
    assert server.request("GET", "/v1/machines", token=token).status_code == 200


def test_third_party_plugin_from_its_own_distribution(server_factory, example_plugin_site,
                                                      tmp_path):
    audit = tmp_path / "audit.log"
    server = server_factory(
        extra_conf="enabled_boot_interfaces = fake,example",
        env={"PYTHONPATH": str(example_plugin_site), "METALBOOT_EXAMPLE_AUDIT": str(audit)})
    server.start()
    names = [b["name"] for b in server.request("GET", "/v1/boot-interfaces").json()[
        "boot_interfaces"]]
    assert names == ["fake", "example"]
    server.request("POST", "/v1/partitions", json={"id": "p1"})
    body = machine_body(1, boot_interface="example", properties={"example_dir": str(tmp_path)})
    assert server.request("POST", "/v1/machines", json=body).status_code == 201
    r = server.request("POST", f"/v1/machines/{body['id']}/validate", json={})
    assert r.json()["valid"] is True
    assert audit.read_text() == f"registered {body['id']} on example\n"


def test_broken_plugin_stops_start_naming_it(server_factory, tmp_path):
    site = tmp_path / "broken-site"
    dist = site / "metalboot_broken-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: metalboot-broken\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[metalboot.boot_interfaces]\nbroken = metalboot_broken:Broken\n")
    (site / "metalboot_broken.py").write_text("raise ImportError('needs libfoo.so')\n")
    server = server_factory(extra_conf="enabled_boot_interfaces = fake,broken",
                            env={"PYTHONPATH": str(site)})
    server.start(wait=False)
    assert server.proc.wait(30) == 1
    log = server.log()
    assert "boot interface 'broken' (metalboot_broken:Broken) failed to load" in log
    assert "needs libfoo.so" in log
    assert "Traceback" not in log


def test_dbsync(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    out = subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.dbsync",
                          "--config-file", str(conf)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "database at revision" in out.stdout
    out = subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.dbsync",
                          "--config-file", str(conf), "--show"], capture_output=True, text=True)
    assert out.stdout.strip() != "empty"
    bad = tmp_path / "bad.conf"
    bad.write_text("[database]\nconnection = nosuchdb://x\n")
    out = subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.dbsync",
                          "--config-file", str(bad)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "schema upgrade failed" in out.stderr and "Traceback" not in out.stderr
    # it upgrades only: an older revision is refused, not silently ignored
    for older in ("0002", "base"):
        out = subprocess.run([sys.executable, "-m", "metalboot_framework.cmd.dbsync",
                              "--config-file", str(conf), older], capture_output=True,
                             text=True)
        assert out.returncode == 1, out
        assert f"past {older}" in out.stderr and "only upgrades" in out.stderr


@pytest.mark.parametrize("command", ["server", "conductor", "boot_server"])
@pytest.mark.parametrize("section, line, message", [
    ("api", "port = abc", "[api] port: invalid literal for int()"),
    ("conductor", "poll_interval = -1", "[conductor] poll_interval: Should be greater than"),
    ("DEFAULT", "log_format = xml", "[DEFAULT] log_format: Valid values are [text, json]"),
    ("fake", "record_events = maybe", "[fake] record_events: Unexpected boolean value"),
])
def test_a_bad_option_value_stops_every_command_naming_it(tmp_path, command, section, line,
                                                          message):
    """oslo.config checks a value when it is first read: a conductor thread read
    poll_interval after the API was up, died, and left the server serving
    without a conductor. Every option is read at start now (the plugins' too)."""
    conf = tmp_path / "m.conf"
    conf.write_text(f"[DEFAULT]\nenabled_boot_interfaces = fake\nstate_path = {tmp_path}/s\n"
                    f"[api]\nport = {free_port()}\n[{section}]\n{line}\n")
    out = subprocess.run([sys.executable, "-m", f"metalboot_framework.cmd.{command}",
                          "--config-file", str(conf)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    [last] = [line for line in out.stderr.splitlines() if "error:" in line]
    assert f"configuration error: {message}" in last and str(conf) in last
