"""The CLI against a real metalboot-server: inventory commands, errors, auth, config."""

import json
import time

import pytest

from tests.functional.cli.conftest import ADMIN, READER, assert_one_line_error, machine_body

pytestmark = pytest.mark.functional

MID = "00000000-0000-4000-8000-000000000001"


def test_wrong_token_is_exit_4(mb):
    r = mb("machines", "list", token="not-a-token")
    assert_one_line_error(r, 4, "unknown token", "HTTP 401")


def test_reader_token_cannot_change_anything(mb, partition):
    r = mb("partitions", "delete", partition, token=READER)
    assert_one_line_error(r, 4, "needs an admin token", "HTTP 403")
    assert mb("partitions", "show", partition, token=READER).code == 0


def test_no_token_is_exit_4(run, server):
    r = run("machines", "list", url=server.url)
    assert_one_line_error(r, 4, "needs a bearer token")


def test_partition_lifecycle_and_409(mb):
    r = mb("partitions", "create", "p1", "--kernel-url", "http://images/vmlinuz",
           "--cmdline", "console=ttyS0", "--property", "rack=7", "-o", "json")
    assert r.code == 0, r
    created = json.loads(r.out)
    assert created["boot"]["kernel_url"] == "http://images/vmlinuz"
    assert created["properties"] == {"rack": 7}
    r = mb("partitions", "create", "p1")
    assert_one_line_error(r, 1, "partition p1 exists already", "HTTP 409", "id: exists already")
    r = mb("partitions", "update", "p1", "--metal-hammer-version", "v1.2")
    assert r.code == 0 and "v1.2" in r.out, r
    r = mb("partitions", "list")
    assert r.code == 0 and r.out.splitlines()[0].split()[:2] == ["ID", "MACHINES"], r
    assert "p1" in r.out and "http://images/vmlinuz" in r.out
    assert mb("partitions", "delete", "p1").code == 0
    assert_one_line_error(mb("partitions", "show", "p1"), 1, "HTTP 404")


def test_register_422_names_the_fields_on_one_line(mb, partition):
    r = mb("machines", "register", "--id", "not-a-uuid", "--partition", partition,
           "--mac", "zz:zz")
    line = assert_one_line_error(r, 1, "HTTP 422", "id: Not a valid UUID.",
                                 "nics.0.mac: Not a valid MAC address")
    assert r.out == ""
    assert line.startswith("metalboot: error: invalid body")


def test_register_unknown_partition_is_422(mb, partition):
    r = mb("machines", "register", "--id", MID, "--partition", "nope")
    assert_one_line_error(r, 1, "partition nope does not exist", "partition:")


def test_show_unknown_machine_is_404(mb):
    r = mb("machines", "show", MID)
    assert_one_line_error(r, 1, f"machine {MID} not found", "HTTP 404")


def test_register_with_password_from_stdin_never_echoes_it(mb, server, partition):
    r = mb("machines", "register", "--id", MID, "--partition", partition, "--mac",
           "52:54:00:00:00:01", "--bmc-address", "10.0.0.1:8443", "--bmc-username", "root",
           "--bmc-password-stdin", "--property", "fake_delay=0", "-o", "json",
           input="s3cret-from-stdin\n")
    assert r.code == 0, r
    assert "s3cret-from-stdin" not in r.out + r.err
    machine = json.loads(r.out)
    assert machine["bmc"] == {"address": "https://10.0.0.1:8443", "username": "root",
                              "verify_tls": True, "password_set": True}
    assert machine["properties"] == {"fake_delay": 0}
    # the server really got it (the API never returns it)
    assert server.request("GET", f"/v1/machines/{MID}").json()["bmc"]["password_set"] is True


def test_register_with_password_from_env(mb, partition):
    r = mb("machines", "register", "--id", MID, "--partition", partition, "--bmc-address",
           "10.0.0.1", "-o", "json", env={"METALBOOT_BMC_PASSWORD": "from-env"})
    assert r.code == 0, r
    assert json.loads(r.out)["bmc"]["password_set"] is True and "from-env" not in r.out


def test_register_password_prompt_does_not_echo(mb, partition):
    r = mb("machines", "register", "--id", MID, "--partition", partition, "--bmc-address",
           "10.0.0.1", "--bmc-password-prompt", "-o", "json", input="typed-secret\n")
    assert r.code == 0, r
    assert "typed-secret" not in r.out + r.err and "BMC password" in r.err
    assert json.loads(r.out)["bmc"]["password_set"] is True


def test_list_show_json_and_table(mb, server, partition):
    bodies = [machine_body(i) for i in range(3)]
    assert server.request("POST", "/v1/machines", json=bodies).status_code == 201
    r = mb("machines", "list", "-o", "json")
    assert r.code == 0, r
    assert [m["id"] for m in json.loads(r.out)] == sorted(b["id"] for b in bodies)
    # the global option works too, before the group
    r = mb("--output", "json", "machines", "show", bodies[1]["id"])
    assert [n["mac"] for n in json.loads(r.out)["nics"]] == [bodies[1]["nics"][0]["mac"]]
    r = mb("machines", "list", "--limit", "2")
    lines = r.out.splitlines()
    assert lines[0].split()[:2] == ["ID", "PARTITION"] and len(lines) == 3
    r = mb("boot-interfaces", "list", "-o", "json")
    names = {i["name"]: i for i in json.loads(r.out)}
    assert set(names) == {"fake", "fake-alt"} and names["fake"]["default"] is True
    assert "fake (default)" in mb("boot-interfaces", "list").out


def test_csv_import(mb, server, partition, tmp_path):
    path = tmp_path / "machines.csv"
    path.write_text(
        "id,partition,mac,bmc_address,bmc_username,bmc_password,boot_interface,"
        "property.fake_autoboot,property.rack\n"
        f"{machine_body(1)['id']},p1,52:54:00:00:00:01;52:54:00:00:00:11,10.0.0.1,root,"
        "pw1,fake,true,a7\n"
        f"{machine_body(2)['id']},p1,52:54:00:00:00:02,,,,fake-alt,,\n")
    r = mb("machines", "import", path)
    assert r.code == 0 and "registered 2 machine(s) from machines.csv" in r.out, r
    one = server.request("GET", f"/v1/machines/{machine_body(1)['id']}").json()
    assert [n["mac"] for n in one["nics"]] == ["52:54:00:00:00:01", "52:54:00:00:00:11"]
    assert one["bmc"]["username"] == "root" and one["bmc"]["password_set"] is True
    assert one["properties"] == {"fake_autoboot": True, "rack": "a7"}
    two = server.request("GET", f"/v1/machines/{machine_body(2)['id']}").json()
    assert two["boot_interface"] == "fake-alt" and two["bmc"] is None
    assert "pw1" not in r.out + r.err


def test_csv_import_error_names_line_and_field_and_registers_nothing(mb, server, partition,
                                                                     tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,partition,mac\n"
                    f"{machine_body(1)['id']},p1,52:54:00:00:00:01\n"
                    f"{machine_body(2)['id']},p1,not-a-mac\n")
    r = mb("machines", "import", path)
    assert_one_line_error(r, 1, "HTTP 422", "1.nics.0.mac: Not a valid MAC", "CSV line 3")
    assert server.request("GET", "/v1/machines").json()["machines"] == []


def test_json_import_from_stdin(mb, server, partition):
    bodies = [machine_body(i) for i in range(2)]
    r = mb("machines", "import", "-", "-o", "json", input=json.dumps(bodies))
    assert r.code == 0, r
    assert json.loads(r.out)["count"] == 2
    assert len(server.request("GET", "/v1/machines").json()["machines"]) == 2
    r = mb("machines", "import", "-", input=json.dumps(bodies))
    assert_one_line_error(r, 1, "HTTP 409")


def test_validate_exit_codes(mb, server, partition):
    good, bad = machine_body(1), machine_body(2, properties={
        "fake_fail": {"validate": "no BMC licence"}})
    assert server.request("POST", "/v1/machines", json=[good, bad]).status_code == 201
    r = mb("machines", "validate", good["id"], "--boot-interface", "fake-alt")
    assert r.code == 0 and "can use fake-alt" in r.out, r
    r = mb("machines", "validate", bad["id"], "-o", "json")
    assert r.code == 1, r
    result = json.loads(r.out)
    assert result["valid"] is False and "no BMC licence" in result["reason"]


def test_delete(mb, server, partition):
    first, second = server.register_enrolled([machine_body(1), machine_body(2)])
    # prepared for its interface: the conductor cleans that up, then forgets it
    r = mb("machines", "delete", first, "-o", "json")
    assert r.code == 0 and json.loads(r.out) == {"deleted": first, "state": "deleting"}, r
    deadline = time.monotonic() + 20
    while server.request("GET", f"/v1/machines/{first}").status_code != 404:
        assert time.monotonic() < deadline, "never deleted"
        time.sleep(0.1)
    assert_one_line_error(mb("machines", "delete", first), 1, "HTTP 404")
    r = mb("machines", "delete", second, "--force")
    assert r.code == 0 and r.out.strip() == f"deleted machine {second}", r
    assert server.request("GET", f"/v1/machines/{second}").status_code == 404


def test_url_and_token_precedence(run, server, tmp_path, cli_env):
    config = tmp_path / "cli.ini"
    config.write_text(f"[metalboot]\nurl = {server.url}\ntoken = {ADMIN}\n")
    # config file alone
    assert run("--config", config, "partitions", "list").code == 0
    # environment beats the file
    r = run("--config", config, "partitions", "list", env={"METALBOOT_TOKEN": "wrong"})
    assert_one_line_error(r, 4, "unknown token")
    # a flag beats the environment
    r = run("--config", config, "partitions", "list", token=ADMIN,
            env={"METALBOOT_TOKEN": "wrong"})
    assert r.code == 0, r
    # the default file ~/.config/metalboot/cli.ini, with a token_file
    token_file = tmp_path / "token"
    token_file.write_text(READER + "\n")
    default = tmp_path / "home" / ".config" / "metalboot" / "cli.ini"
    default.parent.mkdir(parents=True)
    default.write_text(f"[metalboot]\nurl = {server.url}\ntoken_file = {token_file}\n")
    assert run("partitions", "list").code == 0
    assert_one_line_error(run("partitions", "create", "px"), 4, "needs an admin token")
    # METALBOOT_URL beats the file's url
    r = run("partitions", "list", env={"METALBOOT_URL": "http://127.0.0.1:1"})
    assert_one_line_error(r, 3, "http://127.0.0.1:1")


def test_events_tail(mb, server, partition):
    for i in range(3):
        assert server.request("POST", "/v1/machines", json=machine_body(i)).status_code == 201
    server.wait_enrolled()  # then nothing happens any more
    feed = server.request("GET", "/v1/events?limit=1000").json()["events"]
    r = mb("events", "tail", "-n", "2", "-o", "json")
    assert r.code == 0, r
    events = [json.loads(line) for line in r.out.splitlines()]
    assert len(events) == 2 and events[0]["id"] < events[1]["id"]
    assert events == feed[-2:]
    r = mb("events", "tail", "--machine", machine_body(0)["id"])
    assert r.code == 0 and r.out.strip(), r
    assert all(machine_body(0)["id"] in line for line in r.out.splitlines())
    r = mb("events", "tail", "--since", str(events[0]["id"]), "-o", "json")
    assert [json.loads(x)["id"] for x in r.out.splitlines()] == [events[1]["id"]]


@pytest.mark.parametrize("ident", ["../partitions/p1", "..", "a b?c#d", "%2e%2e"])
def test_ids_stay_in_their_path_segment(mb, server, partition, ident):
    """`machines delete ../partitions/p1` once deleted the partition: an id is
    one path segment, whatever it holds."""
    for args in (("machines", "delete", ident, "--force"), ("machines", "show", ident),
                 ("partitions", "delete", ident), ("migrations", "cancel", ident)):
        r = mb(*args)
        assert r.code == 1 and "HTTP 404" in r.err, (args, r)
    assert server.request("GET", "/v1/partitions/p1").status_code == 200


def test_api_url_with_v1_names_the_fix(run, server):
    assert_one_line_error(run("machines", "list", url=server.url + "/v1", token=ADMIN), 2,
                          "without /v1", server.url)
