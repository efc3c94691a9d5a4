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
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import current_app, g, request
from marshmallow import ValidationError

from metalboot_framework import __version__
from metalboot_framework.api import auth
from metalboot_framework.api.schemas import ErrorSchema
from metalboot_framework.exceptions import InvalidInput, MetalbootError

ERROR_DESCRIPTIONS = {
    400: "Malformed request (not JSON)",
    401: "Missing or unknown token",
    403: "Token lacks the role",
    404: "Not found",
    409: "Conflict (exists, locked, or busy in a migration)",
    413: "Request body too large",
    415: "Body is not application/json",
    422: "Invalid input; error.fields names each field",
}


class BadRequest(MetalbootError):
    code = 400


class UnsupportedMediaType(MetalbootError):
    code = 415


def flatten_messages(messages, prefix=""):
    """Turn marshmallow's nested messages into {"a.0.b": ["msg"]}."""
    if isinstance(messages, dict):
        flat = {}
        for key, value in messages.items():
            name = prefix if key == "_schema" and prefix else (
                f"{prefix}.{key}" if prefix else str(key))
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
            return name.encode("utf-8", "backslashreplace").decode("ascii"), problem
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
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
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


def json_body():
    if request.mimetype != "application/json":
        raise UnsupportedMediaType(
            f"the body must be application/json, not {request.mimetype or 'absent'}")
    return parse_json(request.get_data(cache=True))


def endpoint(*, role="reader", body=None, body_many=None, query=None, responses=None,
             summary="", tags=(), success=200, extra_errors=()):
    """Mark a view. ``body_many``: the body may also be a list of ``body`` items,
    up to that many (then ``body`` is passed as a list and ``many=True``)."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            if role is not None:
                auth.require(role)
            if body is not None:
                data = json_body()
                if body_many and isinstance(data, list):
                    if len(data) > body_many:
                        raise InvalidInput(
                            f"at most {body_many} items per request, got {len(data)}",
                            fields={"_schema": [f"at most {body_many} items"]})
                    if not data:
                        raise InvalidInput("the list is empty",
                                           fields={"_schema": ["give at least one item"]})
                    kwargs["body"] = _load(body(), data, "body", many=True)
                    kwargs["many"] = True
                else:
                    if not isinstance(data, dict):
                        raise InvalidInput("the body must be a JSON object"
                                           + (" or a list" if body_many else ""),
                                           fields={"_schema": ["must be an object"]})
                    kwargs["body"] = _load(body(), data, "body")
                    if body_many:
                        kwargs["many"] = False
            if query is not None:
                params = request.args.to_dict()
                reject_bad_text(params)
                kwargs["query"] = _load(query(), params, "query")
            elif request.args:
                unknown = sorted(request.args)
                raise InvalidInput(f"unknown query parameter(s): {', '.join(unknown)}",
                                   fields={k: ["Unknown field."] for k in unknown})
            return view(*args, **kwargs)

        wrapper._mb_doc = dict(role=role, body=body, body_many=body_many, query=query,
                               responses=responses or {}, summary=summary or
                               (view.__doc__ or "").strip().split("\n")[0], tags=list(tags),
                               description=(view.__doc__ or "").strip(), success=success,
                               extra_errors=extra_errors)
        return wrapper

    return decorate


_PATH_PARAM = re.compile(r"<(?:[a-z_]+:)?([a-z_]+)>")


def openapi_document(app):
    spec = APISpec(title="metalboot", version=__version__, openapi_version="3.0.3",
                   plugins=[MarshmallowPlugin()],
                   info={"description": "Move bare-metal machines between boot interfaces, "
                                        "with proof of every boot."})
    spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer"})
    spec.components.schema("Error", schema=ErrorSchema)
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        view = app.view_functions.get(rule.endpoint)
        doc = getattr(view, "_mb_doc", None)
        if doc is None:
            continue
        path = _PATH_PARAM.sub(r"{\1}", rule.rule)
        params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in _PATH_PARAM.findall(rule.rule)]
        operations = {}
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            op = {"summary": doc["summary"], "description": doc["description"],
                  "operationId": rule.endpoint.replace(".", "_") + "_" + method.lower(),
                  "tags": doc["tags"], "responses": {}}
            parameters = list(params)
            if doc["query"] is not None:
                parameters.append({"in": "query", "schema": doc["query"]})
            if parameters:
                op["parameters"] = parameters
            if doc["body"] is not None:
                item = doc["body"]
                schema = item if not doc["body_many"] else {
                    "oneOf": [item, {"type": "array", "items": item,
                                     "minItems": 1, "maxItems": doc["body_many"]}]}
                op["requestBody"] = {"required": True,
                                     "content": {"application/json": {"schema": schema}}}
            for status, schema in doc["responses"].items():
                op["responses"][str(status)] = {
                    "description": "OK" if status < 300 else ERROR_DESCRIPTIONS.get(status, ""),
                    "content": {"application/json": {"schema": schema}}} if schema else {
                    "description": "No content"}
            errors = {404} if params else set()
            if doc["role"] is not None:
                op["security"] = [{"bearer": []}]
                errors |= {401, 403}
            if doc["body"] is not None:
                errors |= {400, 413, 415, 422}
            if doc["query"] is not None or doc["body"] is not None:
                errors.add(422)
            errors |= set(doc["extra_errors"])
            for status in sorted(errors):
                op["responses"].setdefault(str(status), {
                    "description": ERROR_DESCRIPTIONS[status],
                    "content": {"application/json": {"schema": "Error"}}})
            operations[method.lower()] = op
        spec.path(path=path, operations=operations)
    return spec.to_dict()


def current_services():
    return current_app.extensions["metalboot"]


def request_id():
    return getattr(g, "request_id", None)
