"""The served OpenAPI document is valid and the answers match it."""

import jsonschema
import pytest
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

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
    body = create["requestBody"]["content"]["application/json"]["schema"]
    assert body["oneOf"][1]["maxItems"] == 10000
    assert {"401", "403", "409", "413", "415", "422"} <= set(create["responses"])
    # the password is write-only: in the request schema, not in the response one
    schemas = spec["components"]["schemas"]
    assert "password" in schemas["BmcIn"]["properties"]
    assert "password" not in schemas["BmcOut"]["properties"]


def _resolve(spec, schema):
    """Inline $refs, and forbid properties the document does not name."""
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
        else:
            out[key] = _resolve(spec, value)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _check(spec, path, method, status, body):
    schema = spec["paths"][path][method]["responses"][str(status)]["content"][
        "application/json"]["schema"]
    jsonschema.validate(body, _resolve(spec, schema), cls=OAS30Validator)


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
