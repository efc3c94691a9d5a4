"""Property-based run of the API against its own OpenAPI document.

schemathesis generates requests from the served document (valid and invalid
ones) and runs every check it has on every answer: no 5xx, status codes,
headers and bodies as documented, invalid requests rejected, valid ones
accepted. The few rules the server enforces beyond what a schema can say
(an enabled boot interface, an existing partition...) are named, operation
by operation, in schemathesis.toml at the top of the repository; the two that
no OpenAPI 3.0 keyword can say are applied to the generated bodies here. CI runs a
bounded number of examples per operation (SCHEMATHESIS_MAX_EXAMPLES, default
15); `tox -e schemathesis` runs many more.
"""

import os
import re
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from metalboot_framework.api.schemas import CLEAN_TEXT
from tests.conftest import ADMIN, machine_body

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "15"))
CONFIG = Path(__file__).resolve().parents[2] / "schemathesis.toml"
CLEAN = re.compile(CLEAN_TEXT)


@pytest.fixture
def api_schema(app, api):
    assert api.post("/v1/partitions", json={"id": "p1"}).status_code == 201
    assert api.post("/v1/machines", json=[machine_body(i) for i in range(3)]).status_code == 201
    return schemathesis.openapi.from_wsgi("/v1/openapi.json", app,
                                          config=SchemathesisConfig.from_path(str(CONFIG)))


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms(case):
    # schemathesis may add an unknown query key with the value [] or None, which
    # no request can carry (it is never sent), and then expects a rejection:
    # send such a key with an empty value, so the request really has it.
    if case.query:
        known = {p.name for p in case.operation.iter_parameters() if p.location == "query"}
        case.query = {k: "" if k not in known and v in (None, []) else v
                      for k, v in case.query.items()}
    if isinstance(case.body, (dict, list)):
        case.body = _within_unwritable_rules(case.body)
    case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN}"})


def _storable(value):
    """No string of ``value`` (keys included, at any depth) holds a NUL or a
    lone surrogate."""
    if isinstance(value, str):
        return "\x00" not in value and _utf8(value)
    if isinstance(value, dict):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_storable(v) for v in value)
    return True


def _utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _within_unwritable_rules(body):
    """``body`` within the rules of the server that no OpenAPI 3.0 keyword
    can say (schemathesis.toml names them): property keys are clean text (3.0
    has no propertyNames), a property's free-form value holds no text that no
    database stores (a NUL, a lone surrogate: at any depth, keys too), and a
    MAC or DUID is given once in nics (uniqueItems compares whole items).
    Everything else is sent as generated."""
    if isinstance(body, list):
        return [_within_unwritable_rules(item) for item in body]
    if not isinstance(body, dict):
        return body
    body = dict(body)
    if isinstance(body.get("properties"), dict):
        body["properties"] = {k: v for k, v in body["properties"].items()
                              if CLEAN.search(k) and _storable(v)}
    if isinstance(body.get("nics"), list):
        seen, nics = set(), []
        for nic in body["nics"]:
            keys = {(key, str(nic[key]).lower().replace("-", "").replace(":", ""))
                    for key in ("mac", "duid") if isinstance(nic, dict) and nic.get(key)}
            if not keys & seen:
                nics.append(nic)
                seen |= keys
        body["nics"] = nics
    return body
