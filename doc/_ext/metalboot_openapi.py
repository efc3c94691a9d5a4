"""Sphinx extension: the REST API reference, generated from the app's OpenAPI document.

``.. metalboot-openapi::`` builds the document exactly as the server serves it
at ``/v1/openapi.json`` -- ``openapi_document(create_app(services))`` with a
:class:`~metalboot_framework.services.Services` on a throw-away state
directory (SQLite, the ``fake`` boot interface) -- and renders every
operation (grouped by tag) and every schema. Operation descriptions are the
view functions' docstrings and are parsed as reStructuredText. The JSON
document itself is written next to the HTML pages as ``openapi.json``.
"""

import inspect
import json
import os
import shutil
import tempfile

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

METHOD_ORDER = ("get", "post", "put", "patch", "delete")


def build_document():
    """The OpenAPI document of a metalboot app with default options."""
    from oslo_config import cfg

    from metalboot_framework.api import create_app
    from metalboot_framework.api.spec import openapi_document
    from metalboot_framework.conf import opts as core_opts
    from metalboot_framework.services import Services

    state = tempfile.mkdtemp(prefix="metalboot-doc-")
    try:
        conf = cfg.ConfigOpts()
        for group, options in core_opts.list_opts():
            conf.register_opts(options, group=None if group == "DEFAULT" else group)
        conf([], project="metalboot", default_config_files=[], default_config_dirs=[])
        conf.set_override("state_path", state)
        conf.set_override("admin_tokens", ["doc-build"], group="api")
        services = Services.from_conf(conf, upgrade=True)
        try:
            return openapi_document(create_app(services))
        finally:
            services.db.dispose()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _escape(text):
    """Plain text (schema descriptions, enum values) made inert for reST."""
    out = str(text)
    for ch in "\\*`|_[":
        out = out.replace(ch, "\\" + ch)
    return " ".join(out.split())


def _ref_name(ref):
    return ref.rsplit("/", 1)[-1]


def _type_of(schema):
    """A short text for a schema's type, with links to component schemas."""
    if not schema:
        return "any"
    if "$ref" in schema:
        return f":ref:`{_ref_name(schema['$ref'])} <openapi-schema-{_ref_name(schema['$ref'])}>`"
    if len(schema.get("allOf", ())) == 1:  # a reference with its own description
        return _type_of(schema["allOf"][0])
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(_type_of(s) for s in schema.get("oneOf") or schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type_of(schema.get('items'))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(
            schema["additionalProperties"], dict):
        return f"object of {_type_of(schema['additionalProperties'])}"
    if schema.get("format"):
        kind += f" ({schema['format']})"
    return kind


def _constraints(schema):
    parts = []
    if schema.get("enum"):
        parts.append("one of " + ", ".join(f"``{v}``" for v in schema["enum"]))
    for key, label in (("minimum", "min"), ("maximum", "max"), ("minLength", "min length"),
                       ("maxLength", "max length"), ("minItems", "min items"),
                       ("maxItems", "max items")):
        if key in schema:
            parts.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        parts.append(f"pattern ``{schema['pattern']}``")
    if "default" in schema and schema["default"] is not None:
        parts.append(f"default ``{json.dumps(schema['default'])}``")
    if schema.get("nullable"):
        parts.append("may be null")
    if schema.get("readOnly"):
        parts.append("read-only")
    return "; ".join(parts)


def _field_rows(properties, required=()):
    rows = []
    for name, schema in properties.items():
        text = _escape(schema.get("description", ""))
        extra = _constraints(schema)
        if extra:
            text = f"{text} ({extra})" if text else extra
        rows.append((f"``{name}``" + (" (required)" if name in required else ""),
                     _type_of(schema), text or "\u2014"))
    return rows


def _table(rows, header, indent=""):
    if not rows:
        return []
    lines = [f"{indent}.. list-table::", f"{indent}   :header-rows: 1",
             f"{indent}   :widths: 25 25 50", ""]
    for row in [header] + rows:
        lines.append(f"{indent}   * - {row[0]}")
        for cell in row[1:]:
            lines.append(f"{indent}     - {cell}")
    return lines + [""]


def _heading(text, char):
    return [text, char * len(text), ""]


def _authentication(doc, op):
    """Who may call an operation: its own security, else the document's."""
    schemes = {name for requirement in op.get("security", doc.get("security", []))
               for name in requirement}
    if not schemes:
        return "none"
    if "machineToken" in schemes:
        return "the machine's per-machine token (as a bearer token or in the body)"
    return "bearer token"


def _examples(media):
    """(title, value) of a request body's examples."""
    if "example" in media:
        return [("Example", media["example"])]
    return [(f"Example ({name})", example["value"])
            for name, example in media.get("examples", {}).items()]


def render(doc):
    """reStructuredText lines for the whole document."""
    lines = []
    info = doc.get("info", {})
    lines += [_escape(info.get("description", "")), "",
              f"OpenAPI {doc.get('openapi')}, API version {info.get('version')}. The same "
              f"document is served at ``/v1/openapi.json`` and is next to these pages as "
              f"`openapi.json <openapi.json>`__.", ""]
    by_tag = {}
    for path, operations in sorted(doc.get("paths", {}).items()):
        for method in METHOD_ORDER:
            if method in operations:
                op = operations[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append(
                    (path, method, op))
    described = {tag["name"]: tag.get("description", "") for tag in doc.get("tags", [])}
    order = list(described) + sorted(set(by_tag) - set(described))
    for tag in [t for t in order if t in by_tag]:
        lines += _heading(tag.replace("-", " ").capitalize(), "-")
        if described.get(tag):
            lines += [_escape(described[tag]), ""]
        for path, method, op in by_tag[tag]:
            lines += [f".. _openapi-{op['operationId']}:", ""]
            lines += _heading(f"{method.upper()} {path}", "~")
            description = inspect.cleandoc(op.get("description") or op.get("summary") or "")
            lines += description.splitlines() + [""]
            lines += [f"**Authentication:** {_authentication(doc, op)}",
                      "", f"**Operation id:** ``{op['operationId']}``", ""]
            params = op.get("parameters", [])
            rows = []
            for p in params:
                schema = dict(p.get("schema", {}))
                if p.get("description"):
                    schema.setdefault("description", p["description"])
                rows += [(f"``{p['name']}`` ({p['in']})" + (" (required)" if p.get("required")
                                                             else ""),
                          *_field_rows({p["name"]: schema})[0][1:])]
            if rows:
                lines += ["**Parameters**", ""] + _table(rows, ("name", "type", "description"))
            body = op.get("requestBody")
            if body:
                media = body.get("content", {}).get("application/json", {})
                lines += [f"**Request body** (JSON): {_type_of(media.get('schema', {}))}", ""]
                for title, value in _examples(media):
                    lines += [f"{title}:", "", ".. code-block:: json", ""]
                    lines += ["   " + line for line in json.dumps(value, indent=2).splitlines()]
                    lines += [""]
            rows = []
            for status, answer in sorted(op.get("responses", {}).items()):
                schema = (answer.get("content") or {}).get("application/json", {}).get(
                    "schema")
                meaning = _escape(answer.get("description", "")) or "\u2014"
                if answer.get("headers"):
                    meaning += "; headers: " + ", ".join(f"``{h}``" for h in answer["headers"])
                rows.append((f"``{status}``", _type_of(schema) if schema else "\u2014",
                             meaning))
            lines += ["**Responses**", ""] + _table(rows, ("status", "body", "meaning"))
    lines += _heading("Schemas", "-")
    for name, schema in sorted(doc.get("components", {}).get("schemas", {}).items()):
        lines += [f".. _openapi-schema-{name}:", ""]
        lines += _heading(name, "~")
        if schema.get("description"):
            lines += [_escape(schema["description"]), ""]
        properties = schema.get("properties")
        if "oneOf" in schema and not properties:
            lines += ["One of: " + ", ".join(_type_of(choice) for choice in schema["oneOf"]),
                      ""]
        elif properties:
            lines += _table(_field_rows(properties, schema.get("required", ())),
                            ("field", "type", "description"))
        else:
            lines += [f"Type: {_type_of(schema)}", ""]
    return lines


class OpenApiDirective(SphinxDirective):
    has_content = False

    def run(self):
        doc = document()
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(render(doc), source="openapi"),
                                 container)
        return container.children


_CACHE = []


def document():
    if not _CACHE:
        _CACHE.append(build_document())
    return _CACHE[0]


def write_json(app, exception):
    if exception is None and app.builder.format == "html":
        with open(os.path.join(app.outdir, "openapi.json"), "w") as f:
            json.dump(document(), f, indent=2, sort_keys=True)
            f.write("\n")


def setup(app):
    app.add_directive("metalboot-openapi", OpenApiDirective)
    app.connect("build-finished", write_json)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
