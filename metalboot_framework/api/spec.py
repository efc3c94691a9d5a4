"""Declaring endpoints once: validation, auth and the OpenAPI document.

``@endpoint(...)`` marks a Flask view with its request and response schemas and
the role it needs. The same marks drive request parsing (so a schema is the one
place a rule lives) and :func:`openapi_document`, which apispec turns into an
OpenAPI 3 document.
"""

import functools
import json
import math
import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin, OpenAPIConverter
from apispec.ext.marshmallow.common import resolve_schema_cls
from apispec.ext.marshmallow.field_converter import DEFAULT_FIELD_MAPPING
from flask import current_app, g, request
from marshmallow import ValidationError, fields

from metalboot_framework import __version__
from metalboot_framework.api import auth
from metalboot_framework.api.schemas import (CLEAN_TEXT, ErrorSchema, StrictSchema, Timestamp,
                                             clean_text, escape_unclean)
from metalboot_framework.exceptions import InvalidInput, MetalbootError

ERROR_DESCRIPTIONS = {
    400: "Malformed request (not JSON)",
    401: "Missing or unknown token",
    403: "Token lacks the role",
    404: "Not found",
    409: "Conflict (exists, locked, or busy in a migration)",
    410: "Cursor unknown: read a new snapshot",
    413: "Request body too large",
    415: "Body is not application/json",
    422: "Invalid input; error.fields names each field",
}


# Who may call an endpoint: a bearer token of a role, anyone, or a booted
# machine with its per-machine token (which the view checks).
# "agent": an admin token or the agent token of the partition in the path
# (metalboot_framework.agent_tokens).
ROLES = ("reader", "admin", None, "machine", "agent")


class BadRequest(MetalbootError):
    code = 400


class UnsupportedMediaType(MetalbootError):
    code = 415


def flatten_messages(messages, prefix=""):
    """Turn marshmallow's nested messages into {"a.0.b": ["msg"]}."""
    if isinstance(messages, dict):
        flat = {}
        for key, value in messages.items():
            key = escape_unclean(str(key))  # a key may be what is refused
            name = prefix if key == "_schema" and prefix else (
                f"{prefix}.{key}" if prefix else key)
            flat.update(flatten_messages(value, name))
        return flat
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        return {prefix or "_schema": list(messages)}
    if isinstance(messages, list):
        flat = {}
        for index, value in enumerate(messages):
            flat.update(flatten_messages(value, f"{prefix}.{index}" if prefix else str(index)))
        return flat
    return {prefix or "_schema": [str(messages)]}


def _load(schema, data, location, many=False):
    try:
        return schema.load(data, many=many)
    except ValidationError as exc:
        fields = flatten_messages(exc.messages)
        first = next(iter(fields.items()))
        raise InvalidInput(f"invalid {location}: {first[0]}: {first[1][0]}"
                           + (f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""),
                           fields=fields)


# Levels of arrays and objects a request body may nest: far beyond any schema's,
# and far below the recursion that would fail the parser (and later the JSON
# column's encoder) with a 500.
MAX_JSON_DEPTH = 32


_NUL = "NUL characters are not allowed."
_SURROGATE = ("Lone surrogates (\\ud800-\\udfff outside a pair) are not allowed: "
              "they are not Unicode text.")


def _text_problem(text):
    """Why no database can store ``text`` (None: it can). JSON's \\u escapes
    can spell a NUL and half a UTF-16 surrogate pair, which Python reads into
    a str that cannot be encoded as UTF-8."""
    if "\x00" in text:
        return _NUL
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return _SURROGATE
    return None


def _bad_text(value, path="", depth=0):
    """(path, why) of the first string (value or object key) that no database
    stores (see :func:`_text_problem`), or None. The same walk measures the
    nesting: BadRequest past :data:`MAX_JSON_DEPTH` levels of arrays and objects."""
    if isinstance(value, str):
        problem = _text_problem(value)
        return (path or "_schema", problem) if problem else None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    if depth == MAX_JSON_DEPTH:
        raise BadRequest(f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    for key, item in items:
        name = f"{path}.{key}" if path else str(key)
        problem = _text_problem(key) if isinstance(key, str) else None
        if problem:
            return name.encode("utf-8", "backslashreplace").decode("utf-8"), problem
        found = _bad_text(item, name, depth + 1)
        if found:
            return found
    return None


def reject_bad_text(data):
    """InvalidInput naming the first field whose text no database stores."""
    found = _bad_text(data)
    if found:
        field, problem = found
        raise InvalidInput(f"{field}: {problem}", fields={field: [problem]})


class _NotFinite(ValueError):
    """NaN, Infinity (Python's json reads them; strict parsers do not) or a
    number beyond a double's range (Python's reads it as Infinity)."""


def _no_constant(name):
    raise _NotFinite(f"{name} is not a JSON number")


def _finite(text):
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"{text} is beyond the range of a double")
    return value


def parse_json(raw):
    """A request body (bytes) as JSON: BadRequest if it is not JSON, holds
    NaN or Infinity (which no strict parser reads back), or nests deeper than
    :data:`MAX_JSON_DEPTH`; InvalidInput naming the field of a NUL character
    or a lone surrogate."""
    try:
        # JSON between systems is UTF-8 (RFC 8259 section 8.1): json.loads
        # would read UTF-16 and UTF-32 bytes too
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8: JSON is sent as UTF-8 (RFC 8259)")
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise BadRequest(f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    except _NotFinite as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}")
    except ValueError:  # also UnicodeDecodeError
        raise BadRequest("the body is not valid JSON")
    if data is None:
        raise BadRequest("the body is JSON null")
    reject_bad_text(data)
    return data


def json_body(mimetype, raw):
    """A request body (bytes) of ``mimetype`` as JSON (see :func:`parse_json`)."""
    if mimetype != "application/json":
        raise UnsupportedMediaType(
            f"the body must be application/json, not {mimetype or 'absent'}")
    return parse_json(raw)


def load_body(schema, mimetype, raw, many=None):
    """What ``@endpoint(body=schema)`` checks of a body, for any server: a
    JSON object (or, with ``many``, a list of up to that many) valid for
    ``schema`` (a class). Returns (the loaded body, whether it was a list)."""
    data = json_body(mimetype, raw)
    if many and isinstance(data, list):
        if len(data) > many:
            raise InvalidInput(f"at most {many} items per request, got {len(data)}",
                               fields={"_schema": [f"at most {many} items"]})
        if not data:
            raise InvalidInput("the list is empty",
                               fields={"_schema": ["give at least one item"]})
        return _load(schema(), data, "body", many=True), True
    if not isinstance(data, dict):
        raise InvalidInput("the body must be a JSON object" + (" or a list" if many else ""),
                           fields={"_schema": ["must be an object"]})
    return _load(schema(), data, "body"), False


def reject_query(names):
    """InvalidInput naming the query parameters of an endpoint that takes none."""
    if names:
        unknown = sorted(names)
        raise InvalidInput(f"unknown query parameter(s): {', '.join(unknown)}",
                           fields={k: ["Unknown field."] for k in unknown})


def endpoint(*, role="reader", body=None, body_many=None, query=None, responses=None,
             summary="", tags=(), success=200, extra_errors=(), example=None, location=False,
             authenticate=None):
    """Mark a view.

    ``role``: "reader" or "admin" (a bearer token of that role), None (no
    token), or "machine" (the view checks the per-machine token itself).
    ``body_many``: the body may also be a list of ``body`` items, up to that
    many (then ``body`` is passed as a list and ``many=True``). ``example``: a
    valid request body, shown in the document (and sent by schemathesis).
    ``location``: the 2xx answer names the new resource in ``Location``.
    ``authenticate``: for role "machine", called with the view's arguments
    before the body is read or checked (401/403 come before 400/422); what it
    returns is passed as ``auth``.
    A response schema may be a :class:`OneOf` of schemas.
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r} is none of {ROLES}")

    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            if role in ("reader", "admin"):
                auth.require(role)
            elif role == "agent":
                auth.require_agent(kwargs["partition_id"])
            elif authenticate is not None:
                kwargs["auth"] = authenticate(*args, **kwargs)
            if body is not None:
                kwargs["body"], many = load_body(body, request.mimetype,
                                                 request.get_data(cache=True), body_many)
                if body_many:
                    kwargs["many"] = many
            if query is not None:
                params = request.args.to_dict()
                reject_bad_text(params)
                kwargs["query"] = _load(query(), params, "query")
            else:
                reject_query(set(request.args))
            return view(*args, **kwargs)

        wrapper._mb_doc = dict(role=role, body=body, body_many=body_many, query=query,
                               responses=responses or {}, summary=summary or
                               (view.__doc__ or "").strip().split("\n")[0], tags=list(tags),
                               description=(view.__doc__ or "").strip(), success=success,
                               extra_errors=extra_errors, example=example, location=location,
                               operation_id=_camel_case(view.__name__))
        return wrapper

    return decorate


_PATH_PARAM = re.compile(r"<(?:[a-z_]+:)?([a-z_]+)>")

# The groups of operations, in the order a reader meets them.
TAGS = (
    {"name": "root", "description": "The API's name, version and collections."},
    {"name": "boot-interfaces", "description": "The boot interfaces this deployment offers."},
    {"name": "partitions", "description": "Partitions and the boot configuration (kernel, "
                                          "initrd, command line) their machines boot with."},
    {"name": "partition-agents", "description": "What a partition's boot agents "
                                                "(metalboot-boot-agent) read and deliver, and "
                                                "their partition-scoped tokens."},
    {"name": "machines", "description": "Registration, inventory, validation and the history "
                                        "(events, boot evidence) of machines."},
    {"name": "migrations", "description": "Move machines between boot interfaces with proof "
                                          "of every boot; pause, resume, cancel."},
    {"name": "events", "description": "Every machine and migration event, behind a stable "
                                      "cursor."},
    {"name": "boot", "description": "What a booted machine calls, with the per-machine token "
                                    "its boot carried."},
)

SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer",
               "description": "An admin token ([api] admin_tokens) may change things, a "
                              "reader token ([api] reader_tokens) may only read."},
    "machineToken": {"type": "http", "scheme": "bearer",
                     "description": "The per-machine token of a boot (the METAL_BOOT_TOKEN "
                                    "kernel parameter of its boot.ipxe); also accepted as "
                                    "the body's token field."},
}

# A string without NUL characters, as a JSON Schema pattern.
NUL_FREE = "^[^\\u0000]*$"

# The null of a nullable reference, as OpenAPI 3.0 reads it strictly (no
# "null" type before 3.1): null is its only value, and ``nullable`` says so to
# validators that refuse null where a schema is not nullable.
NULL = {"nullable": True, "enum": [None], "description": "No value."}

LOCATION_HEADER = {"description": "The URL of the new resource.",
                   "schema": {"type": "string"}}


def _camel_case(name):
    """An operationId from a view function's name: list_machines -> listMachines."""
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


class OneOf:
    """A named choice between schemas, for a body or an answer with more than one
    shape (generated clients get one type with a variant per schema)."""

    def __init__(self, name, *choices, description=""):
        self.name = name
        self.choices = choices
        self.description = description


class _Converter(OpenAPIConverter):
    """apispec's converter, exact where generated clients need it: a nullable
    reference is ``{nullable, oneOf: [$ref, NULL]}`` (the referenced shape still
    applies, and null is valid read strictly: OpenAPI 3.0's ``nullable`` only
    widens a ``type`` beside it), floats are doubles,
    timestamps date-times, and a schema's ``Meta.openapi`` adds rules between
    its fields (e.g. one of two fields)."""

    field_mapping = {**DEFAULT_FIELD_MAPPING, fields.Float: ("number", "double"),
                     Timestamp: ("string", "date-time")}

    def init_attribute_functions(self):
        super().init_attribute_functions()
        self.attribute_functions.append(self.field2nul_free)

    def field2nul_free(self, field, ret):
        """A string of a request is clean text (:func:`schemas.clean_text`), or
        at least holds no NUL character (see reject_bad_text): said as a
        pattern where the field has no pattern, enum or format of its own."""
        if ret.get("type") == "string" and not {"pattern", "enum", "format"} & set(ret) \
                and isinstance(getattr(field, "root", None), StrictSchema):
            return {"pattern": CLEAN_TEXT if clean_text in field.validators else NUL_FREE}
        return {}

    def field2nullable(self, field, ret):
        # nullable beside the oneOf too: readers that check null before a
        # oneOf (kin-openapi) see it; strict readers ignore it without a type
        if field.allow_none and "$ref" in ret:
            return {"nullable": True, "oneOf": [{"$ref": ret.pop("$ref")}, NULL]}
        if field.allow_none and "allOf" in ret:  # a reference with a description
            return {"nullable": True, "oneOf": ret.pop("allOf") + [NULL]}
        if field.allow_none and "type" not in ret and "oneOf" in ret:  # a choice
            return {"nullable": True, "oneOf": ret["oneOf"] + [NULL]}
        return super().field2nullable(field, ret)

    def dict2properties(self, field, **kwargs):
        """A free-form value of a dict may be null too: ``{}`` says so to
        JSON Schema, ``{nullable: true}`` to readers that refuse null
        wherever a schema is not nullable (kin-openapi)."""
        ret = super().dict2properties(field, **kwargs)
        if ret.get("additionalProperties") == {}:
            ret["additionalProperties"] = {"nullable": True}
        return ret

    def schema2jsonschema(self, schema):
        jsonschema = super().schema2jsonschema(schema)
        jsonschema.update(getattr(getattr(schema, "Meta", None), "openapi", {}))
        return jsonschema


class _Plugin(MarshmallowPlugin):
    Converter = _Converter


class _Document:
    """One OpenAPI document being built from the endpoint marks."""

    def __init__(self):
        self.plugin = _Plugin()
        self.spec = APISpec(
            title="metalboot", version=__version__, openapi_version="3.0.3",
            plugins=[self.plugin], tags=list(TAGS),
            servers=[{"url": "/", "description": "The server that serves this document."}],
            security=[{"bearer": []}],
            info={"description": "Move bare-metal machines between boot interfaces, "
                                 "with proof of every boot."})
        for name, scheme in SECURITY_SCHEMES.items():
            self.spec.components.security_scheme(name, scheme)
        self.ref(ErrorSchema)

    def ref(self, schema):
        """A $ref to ``schema`` (a Schema class, a OneOf, or the name of a
        component registered already), registered once."""
        if isinstance(schema, str):
            return {"$ref": f"#/components/schemas/{schema}"}
        if isinstance(schema, OneOf):
            name, component = schema.name, {"oneOf": [self.ref(c) for c in schema.choices]}
            if schema.description:
                component["description"] = schema.description
        else:
            name, component = self.plugin.schema_name_resolver(schema), None
        if name not in self.spec.components.schemas:
            if component is None:
                self.spec.components.schema(name, schema=resolve_schema_cls(schema))
            else:
                self.spec.components.schema(name, component)
        return {"$ref": f"#/components/schemas/{name}"}

    def request_body(self, doc):
        item = self.ref(doc["body"])
        content = {}
        if doc["body_many"]:
            name = item["$ref"].rsplit("/", 1)[-1]
            if f"{name}List" not in self.spec.components.schemas:
                self.spec.components.schema(f"{name}List", {
                    "type": "array", "items": item, "minItems": 1,
                    "maxItems": doc["body_many"],
                    "description": f"Up to {doc['body_many']} {name} items, all or nothing."})
            content["schema"] = self.ref(OneOf(f"{name}Request", doc["body"],
                                               f"{name}List",
                                               description=f"One {name} or a list of them."))
            if doc["example"] is not None:
                content["examples"] = {"one": {"value": doc["example"]},
                                       "many": {"value": [doc["example"]]}}
        else:
            content["schema"] = item
            if doc["example"] is not None:
                content["example"] = doc["example"]
        return {"required": True, "content": {"application/json": content}}

    def operation(self, doc, params):
        """The operation object of one method of a view marked with ``doc``."""
        op = {"summary": doc["summary"], "description": doc["description"],
              "operationId": doc["operation_id"], "tags": doc["tags"], "responses": {}}
        parameters = list(params)
        if doc["query"] is not None:
            parameters.append({"in": "query", "schema": doc["query"]})
        if parameters:
            op["parameters"] = parameters
        if doc["body"] is not None:
            op["requestBody"] = self.request_body(doc)
        for status, schema in doc["responses"].items():
            answer = {"description": "OK" if status < 300 else ERROR_DESCRIPTIONS.get(status, "")}
            if schema is None:
                answer["description"] = "No content"
            else:
                answer["content"] = {"application/json": {"schema": self.ref(schema)}}
            if doc["location"] and status in (201, 202):
                answer["headers"] = {"Location": LOCATION_HEADER}
            op["responses"][str(status)] = answer
        errors = {404} if params else set()
        if doc["role"] is None:
            op["security"] = []
        elif doc["role"] == "machine":
            # the token may come in the body instead: a request without one is valid
            op["security"] = [{"machineToken": []}, {}]
        else:
            errors |= {401, 403}
        if doc["body"] is not None:
            errors |= {400, 413, 415, 422}
        if doc["query"] is not None or doc["body"] is not None:
            errors.add(422)
        errors |= set(doc["extra_errors"])
        for status in sorted(errors):
            op["responses"].setdefault(str(status), {
                "description": ERROR_DESCRIPTIONS[status],
                "content": {"application/json": {"schema": self.ref(ErrorSchema)}}})
        return op


def openapi_document(app):
    """The OpenAPI 3 document of ``app``'s marked views, as a dict."""
    document = _Document()
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        view = app.view_functions.get(rule.endpoint)
        doc = getattr(view, "_mb_doc", None)
        if doc is None:
            continue
        path = _PATH_PARAM.sub(r"{\1}", rule.rule)
        params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in _PATH_PARAM.findall(rule.rule)]
        operations = {method.lower(): document.operation(doc, params)
                      for method in sorted(rule.methods - {"HEAD", "OPTIONS"})}
        document.spec.path(path=path, operations=operations)
    return document.spec.to_dict()


def current_services():
    return current_app.extensions["metalboot"]


def request_id():
    return getattr(g, "request_id", None)
