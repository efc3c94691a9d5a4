"""The served OpenAPI document is valid, exact enough for generated clients,
and the answers match it."""

import re

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st
from marshmallow import ValidationError
from openapi_schema_validator import OAS30StrictValidator, OAS30Validator
from openapi_spec_validator import validate

from metalboot_framework import ipxe
from metalboot_framework.api import schemas as api_schemas
from tests.conftest import machine_body


@pytest.fixture
def spec(app):
    return app.test_client().get("/v1/openapi.json").json


def test_document_validates(spec):
    validate(spec)
    assert spec["openapi"].startswith("3.")
    for path in ("/v1/machines", "/v1/machines/{machine_id}", "/v1/partitions",
                 "/v1/boot-interfaces", "/v1/machines/{machine_id}/validate",
                 "/v1/machines/{machine_id}/events"):
        assert path in spec["paths"], path
    create = spec["paths"]["/v1/machines"]["post"]
    assert {"401", "403", "409", "413", "415", "422"} <= set(create["responses"])
    # the password is write-only: in the request schema, not in the response one
    schemas = spec["components"]["schemas"]
    assert "password" in schemas["BmcIn"]["properties"]
    assert "password" not in schemas["BmcOut"]["properties"]


def _resolve(spec, schema):
    """Inline $refs, forbid properties the document does not name, and read
    ``nullable`` as generators and schemathesis do: null, or what the rest of
    the schema says (``{nullable, allOf: [$ref]}`` included)."""
    if isinstance(schema, list):
        return [_resolve(spec, v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _resolve(spec, spec["components"]["schemas"][schema["$ref"].split("/")[-1]])
    out = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: _resolve(spec, sub) for name, sub in value.items()}
        elif key != "nullable":
            out[key] = _resolve(spec, value)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if schema.get("nullable"):
        return {"anyOf": [out, {"enum": [None]}]}
    return out


def _schema(spec, path, method, status):
    return spec["paths"][path][method]["responses"][str(status)]["content"][
        "application/json"]["schema"]


def _check(spec, path, method, status, body):
    jsonschema.validate(body, _resolve(spec, _schema(spec, path, method, status)),
                        cls=OAS30Validator, format_checker=OAS30Validator.FORMAT_CHECKER)


def test_answers_match_their_schemas(spec, api, partition):
    r = api.post("/v1/machines", json=[machine_body(1), machine_body(2)])
    _check(spec, "/v1/machines", "post", 201, r.json)
    _check(spec, "/v1/machines", "get", 200, api.get("/v1/machines").json)
    mid = machine_body(1)["id"]
    _check(spec, "/v1/machines/{machine_id}", "get", 200, api.get(f"/v1/machines/{mid}").json)
    _check(spec, "/v1/machines/{machine_id}/events", "get", 200,
           api.get(f"/v1/machines/{mid}/events").json)
    _check(spec, "/v1/partitions", "get", 200, api.get("/v1/partitions").json)
    _check(spec, "/v1/boot-interfaces", "get", 200, api.get("/v1/boot-interfaces").json)
    _check(spec, "/v1/machines/{machine_id}/validate", "post", 200,
           api.post(f"/v1/machines/{mid}/validate", json={}).json)
    r = api.post("/v1/machines", json={"id": "x"})
    _check(spec, "/v1/machines", "post", 422, r.json)
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        _check(spec, "/v1/machines/{machine_id}", "get", 200, {"id": 5})


def test_both_registration_answers_match_the_201_schema(spec, api, partition):
    """One object answers a Machine, a list a MachineCreated: the 201 schema
    describes both, and each answer matches exactly one of its choices."""
    single = api.post("/v1/machines", json=machine_body(1))
    bulk = api.post("/v1/machines", json=[machine_body(2), machine_body(3)])
    assert single.status_code == bulk.status_code == 201
    schema = _schema(spec, "/v1/machines", "post", 201)
    assert spec["components"]["schemas"][schema["$ref"].split("/")[-1]]["oneOf"] == [
        {"$ref": "#/components/schemas/Machine"},
        {"$ref": "#/components/schemas/MachineCreated"}]
    _check(spec, "/v1/machines", "post", 201, single.json)
    _check(spec, "/v1/machines", "post", 201, bulk.json)
    assert single.headers["Location"] == f"/v1/machines/{machine_body(1)['id']}"
    answer = spec["paths"]["/v1/machines"]["post"]["responses"]["201"]
    assert answer["headers"]["Location"]["schema"] == {"type": "string"}


def test_request_bodies_are_named_components(spec):
    """A body that is an object or a list is a $ref to a named oneOf of named
    schemas (oapi-codegen gives an inline oneOf a type that sends {})."""
    components = spec["components"]["schemas"]
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            if "requestBody" in op:
                body = op["requestBody"]["content"]["application/json"]["schema"]
                assert set(body) == {"$ref"}, (method, path, body)
    body = spec["paths"]["/v1/machines"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/MachineCreateRequest"}
    assert components["MachineCreateRequest"]["oneOf"] == [
        {"$ref": "#/components/schemas/MachineCreate"},
        {"$ref": "#/components/schemas/MachineCreateList"}]
    assert components["MachineCreateList"] == {
        "type": "array", "items": {"$ref": "#/components/schemas/MachineCreate"},
        "minItems": 1, "maxItems": 10000,
        "description": components["MachineCreateList"]["description"]}


def _answer_schemas(spec):
    """Names of the component schemas that answers use (directly or nested)."""
    found, todo = set(), []
    for operations in spec["paths"].values():
        for op in operations.values():
            for answer in op["responses"].values():
                schema = (answer.get("content") or {}).get("application/json", {}).get("schema")
                if schema:
                    todo.append(schema)
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].split("/")[-1]
                if name not in found:
                    found.add(name)
                    todo.append(spec["components"]["schemas"][name])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return found


# Answer fields that are present only sometimes (documented as such).
OPTIONAL_ANSWER_FIELDS = {("MaxFailuresOut", "count"), ("MaxFailuresOut", "percent")}


def test_answers_name_the_fields_they_always_carry(spec):
    components = spec["components"]["schemas"]
    answers = _answer_schemas(spec)
    assert {"Machine", "MachineCreated", "Partition", "Migration", "Event", "Error",
            "ErrorBody", "MigrationMachine", "Evidence"} <= answers
    for name in sorted(answers):
        schema = components[name]
        if "properties" not in schema or name == "Selector":  # Selector: the request's
            continue
        missing = {field for field in schema["properties"]
                   if field not in schema.get("required", ())} - {
            field for owner, field in OPTIONAL_ANSWER_FIELDS if owner == name}
        assert not missing, (name, missing)


def _properties(spec):
    for name, schema in spec["components"]["schemas"].items():
        for field, prop in (schema.get("properties") or {}).items():
            yield name, field, prop
    for operations in spec["paths"].values():
        for op in operations.values():
            for param in op.get("parameters", ()):
                yield op["operationId"], param["name"], param["schema"]


def test_types_carry_their_formats(spec):
    times = {(name, field): prop for name, field, prop in _properties(spec)
             if (field.endswith("_at") or field in ("since", "estimated_completion"))
             and prop.get("type") == "string"}
    assert len(times) >= 15
    assert all(prop.get("format") == "date-time" for prop in times.values()), times
    numbers = [prop for _, _, prop in _properties(spec) if prop.get("type") == "number"]
    assert numbers and all(prop["format"] == "double" for prop in numbers)
    wide = {(name, field) for name, field, prop in _properties(spec)
            if prop.get("format") == "int64"}
    assert {("Event", "id"), ("EventList", "next_cursor"), ("Evidence", "id"),
            ("EvidenceList", "next_cursor"), ("BootReportResult", "evidence_id"),
            ("listEvents", "since"), ("listMachineEvents", "since")} <= wide, wide


def _strict(spec, schema):
    """A validator of ``schema`` that reads OpenAPI 3.0 strictly: ``nullable``
    only widens a ``type`` beside it."""
    return OAS30StrictValidator({"allOf": [schema], "components": spec["components"]},
                                format_checker=OAS30StrictValidator.FORMAT_CHECKER)


def test_nullable_references_keep_their_shape(spec):
    nullable_refs = [(name, field, prop) for name, field, prop in _properties(spec)
                     if any(choice.get("enum") == [None] for choice in prop.get("oneOf", ()))
                     and "$ref" in prop["oneOf"][0]]
    assert {(n, f) for n, f, _ in nullable_refs} >= {("Machine", "bmc"), ("Machine", "lock"),
                                                     ("Machine", "migration"),
                                                     ("MigrationMachine", "evidence")}
    for name, field, prop in nullable_refs:
        assert len(prop["oneOf"]) == 2 and set(prop["oneOf"][0]) == {"$ref"}, (name, field)
    # nullable without a type means nothing read strictly: only beside a null choice
    assert not [(name, field) for name, field, prop in _properties(spec)
                if prop.get("nullable") and "type" not in prop and prop.get("enum") != [None]
                and not any(c.get("enum") == [None] for c in prop.get("oneOf", ()))]
    max_failures = _strict(spec, spec["components"]["schemas"]["MigrationCreate"][
        "properties"]["max_failures"])
    assert max_failures.is_valid(None) and max_failures.is_valid("10%")
    lock = _strict(spec, spec["components"]["schemas"]["Machine"]["properties"]["lock"])
    assert lock.is_valid(None)
    assert lock.is_valid({"holder": "c1", "since": "2026-01-01T00:00:00.000Z"})
    assert not lock.is_valid({"holder": 5, "since": "2026-01-01T00:00:00.000Z"})


def test_null_answers_validate_strictly(spec, api, partition):
    """A new machine has no lock and no migration: its 201 is valid read strictly."""
    r = api.post("/v1/machines", json=machine_body(1))
    assert r.status_code == 201 and r.json["lock"] is None and r.json["migration"] is None
    _strict(spec, _schema(spec, "/v1/machines", "post", 201)).validate(r.json)


def test_error_fields_are_lists_of_messages(spec, api, partition):
    fields = spec["components"]["schemas"]["ErrorBody"]["properties"]["fields"]
    assert fields["additionalProperties"] == {"type": "array", "items": {"type": "string"}}
    r = api.post("/v1/machines", json={"id": "x", "partition": "p1"})
    assert r.status_code == 422 and r.json["error"]["fields"]["id"] == ["Not a valid UUID."]
    _check(spec, "/v1/machines", "post", 422, r.json)


def test_tags_servers_security_and_operation_ids(spec):
    tags = [tag["name"] for tag in spec["tags"]]
    assert all(tag["description"] for tag in spec["tags"])
    assert spec["servers"] and spec["security"] == [{"bearer": []}]
    ids = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            assert set(op["tags"]) <= set(tags), (method, path)
            ids.append(op["operationId"])
            assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)+", op["operationId"]), op["operationId"]
    assert len(ids) == len(set(ids))
    assert {"listMachines", "createMachines", "getMachine", "createMigration",
            "pauseMigration", "listEvents", "reportBoot", "createPartition"} <= set(ids)
    paths = spec["paths"]
    assert paths["/v1"]["get"]["security"] == []  # open to anyone
    report = paths["/v1/machines/{machine_id}/boot-report"]["post"]
    assert {"machineToken": []} in report["security"]
    assert spec["components"]["securitySchemes"]["machineToken"]["scheme"] == "bearer"
    assert "security" not in paths["/v1/machines"]["get"]  # the global bearer token
    for path, status in (("/v1/partitions", "201"), ("/v1/migrations", "202")):
        assert "Location" in paths[path]["post"]["responses"][status]["headers"]


def _bodies(app, spec):
    """(operationId, body schema class, media type) of every request body."""
    by_id = {}
    for view in app.view_functions.values():
        doc = getattr(view, "_mb_doc", None)
        if doc and doc["body"] is not None:
            by_id[doc["operation_id"]] = doc["body"]
    for operations in spec["paths"].values():
        for op in operations.values():
            if "requestBody" in op:
                yield (op["operationId"], by_id[op["operationId"]],
                       op["requestBody"]["content"]["application/json"])


def test_every_request_body_has_a_valid_example(app, spec):
    bodies = list(_bodies(app, spec))
    assert len(bodies) == 10
    for operation_id, body_schema, media in bodies:
        examples = [media["example"]] if "example" in media else [
            e["value"] for e in media["examples"].values()]
        assert examples, operation_id
        schema = _resolve(spec, media["schema"])
        for example in examples:
            jsonschema.validate(example, schema, cls=OAS30Validator)
            body_schema().load(example, many=isinstance(example, list))  # the server's rules


SELECTORS = [
    ({"machines": ["00000000-0000-4000-8000-000000000001"]}, True),
    ({"partition": "p1", "state": "ready", "boot_interface": "fake"}, True),
    ({}, False),
    ({"boot_interface": "fake"}, False),
    ({"machines": ["00000000-0000-4000-8000-000000000001"], "partition": "p1"}, False),
    ({"machines": ["00000000-0000-4000-8000-000000000001"], "state": "ready"}, False),
    ({"machines": ["00000000-0000-4000-8000-000000000001"], "boot_interface": "f"}, False),
    ({"machines": ["00000000-0000-4000-8000-000000000001"] * 2}, False),
]


@pytest.mark.parametrize("selector,valid", SELECTORS)
def test_selector_rules_are_in_the_schema(spec, selector, valid):
    """The document and the server agree on which selectors are valid."""
    schema = _resolve(spec, {"$ref": "#/components/schemas/Selector"})
    assert OAS30Validator(schema).is_valid(selector) == valid
    try:
        api_schemas.SelectorSchema().load(selector)
        loaded = True
    except ValidationError:
        loaded = False
    assert loaded == valid


def _server_accepts_cmdline(value):
    try:
        api_schemas.BootConfigSchema().load({"cmdline": value})
        return True
    except ValidationError:
        return False


_CMDLINE_TEXT = st.text(alphabet=st.sampled_from(
    list("ab=#;|& \t\n") + ["\x85", "\xa0", "\u2028", "\u3000", "\ufeff", "\x7f"]),
    max_size=12)


@settings(max_examples=400, deadline=None)
@given(value=_CMDLINE_TEXT)
def test_cmdline_pattern_is_the_servers_rule(value):
    """What the cmdline's pattern allows, the server accepts, and nothing else:
    a generated client (and schemathesis) can check a command line before
    sending it."""
    pattern = api_schemas.exact_end(ipxe.KERNEL_ARGUMENTS.pattern)
    assert bool(re.search(pattern, value)) == _server_accepts_cmdline(value)


def test_cmdline_pattern_is_in_the_document(spec):
    cmdline = spec["components"]["schemas"]["BootConfig"]["properties"]["cmdline"]
    assert cmdline["pattern"] == api_schemas.exact_end(ipxe.KERNEL_ARGUMENTS.pattern)
    for bad in ("a ; chain http://evil/x", "a || b", "a && b", "x #c", "a\u00a0#c", "a\nb"):
        assert not OAS30Validator(cmdline).is_valid(bad), bad
    assert OAS30Validator(cmdline).is_valid("console=ttyS0 ip=dhcp a;b x#y")
    assert not OAS30Validator(cmdline).is_valid("console=ttyS0\n")


def test_patch_needs_a_field_in_the_schema(spec):
    assert spec["components"]["schemas"]["MachinePatch"]["minProperties"] == 1


def test_request_strings_say_they_hold_no_nul(spec, api, partition):
    """The server refuses a NUL character in any string of a request (no
    database stores one), and any control, bidirectional or zero-width
    character in one that is not free text; the document says so for every
    plain string."""
    from metalboot_framework.api.spec import NUL_FREE
    requests = [spec["components"]["schemas"][name] for name in (
        "PartitionCreate", "PartitionPatch", "MachineCreate", "MachinePatch", "BmcIn",
        "MigrationCreate", "BootReport")]
    plain = [prop for schema in requests for prop in schema["properties"].values()
             if prop.get("type") == "string" and not {"enum", "format"} & set(prop)]
    assert len(plain) > 10 and all("pattern" in prop for prop in plain), plain
    query = {p["name"]: p["schema"] for p in spec["paths"]["/v1/machines"]["get"]["parameters"]}
    clean = api_schemas.CLEAN_TEXT
    assert query["partition"]["pattern"] == clean
    assert re.search(NUL_FREE, "p\x00") is None and re.search(NUL_FREE, "p1\n")
    assert re.search(clean, "p1\n") is None and re.search(clean, "a\u202eb") is None
    assert re.search(clean, "é p1 中")
    assert schemas_of(spec, "BmcIn")["password"]["pattern"] == NUL_FREE
    assert schemas_of(spec, "BootReport")["message"]["pattern"] == NUL_FREE
    assert schemas_of(spec, "BmcIn")["username"]["pattern"] == clean
    assert schemas_of(spec, "PartitionCreate")["description"]["pattern"] == clean
    r = api.get("/v1/machines?partition=p%00")
    assert r.status_code == 422 and "partition" in r.json["error"]["fields"]


def schemas_of(spec, name):
    return spec["components"]["schemas"][name]["properties"]


def test_the_contract_check_finds_a_wrong_answer(spec, api, partition):
    """What tests/conftest.py's api_contract checks every answer with."""
    from tests.contract import Document
    document = Document(spec)
    mid = machine_body(1)["id"]
    good = api.post("/v1/machines", json=machine_body(1)).get_data()
    assert document.problems("POST", "/v1/machines", 201, "application/json", good) == []
    wrong = good.replace(b'"lock":null', b'"lock":{}')
    assert wrong != good
    assert document.problems("POST", "/v1/machines", 201, "application/json", wrong)
    assert document.problems("GET", f"/v1/machines/{mid}", 200, "text/plain", good)
    assert document.problems("GET", "/v1/machines", 999, "application/json", b"{}") == []


def test_url_fields_say_the_servers_limits(spec):
    """A client that follows the document is not refused for a rule it could
    not read: kernel_url, initrd_url and metal_boot_url carry their length and
    shape, as BMC addresses, MACs and DUIDs do."""
    boot = schemas_of(spec, "BootConfig")
    for name in ("kernel_url", "initrd_url", "metal_boot_url"):
        assert (boot[name]["minLength"], boot[name]["maxLength"], boot[name]["pattern"]) == \
            (1, 2048, api_schemas.HTTP_URL), name
        check = OAS30StrictValidator(boot[name])
        assert check.is_valid("http://images.example/vmlinuz")
        assert check.is_valid(None)
        for bad in ("", "x" * 2049, "ftp://a/b", "http://a:99999/", "http:///x", "http://a b"):
            assert not check.is_valid(bad), bad
    assert schemas_of(spec, "BmcIn")["address"]["pattern"] == api_schemas.BMC_ADDRESS
    assert schemas_of(spec, "Nic")["mac"]["pattern"] == api_schemas.MAC
    assert schemas_of(spec, "Nic")["duid"]["pattern"] == api_schemas.DUID
    assert schemas_of(spec, "Nic")["ipv4_address"]["format"] == "ipv4"


@pytest.mark.parametrize("field, pattern", [
    (api_schemas.HttpUrl(), api_schemas.HTTP_URL),
    (api_schemas.BmcAddress(), api_schemas.BMC_ADDRESS),
    (api_schemas.MacAddress(), api_schemas.MAC),
    (api_schemas.Duid(), api_schemas.DUID),
], ids=["url", "bmc-address", "mac", "duid"])
def test_address_patterns_allow_only_what_the_server_accepts(field, pattern):
    @settings(max_examples=200, deadline=None)
    @given(st.from_regex(pattern))
    def accepted(value):
        field.deserialize(value)

    accepted()
