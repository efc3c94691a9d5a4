"""Every answer of the API that a test receives, checked against the OpenAPI
document the server serves, as a strict reader of OpenAPI 3.0 reads it.

:class:`Recorder` sees the exchanges of the Flask test clients and of
``requests`` (the servers the functional tests start, and the generated
client, which sends through httpx: recorded too). An answer is checked
against the schema of its operation and status when the document declares
that status for that operation; answers of paths the document does not name
(boot artifacts, the dashboard, other servers) are not checked.
"""

import json
import re
import urllib.request
from urllib.parse import urlsplit

import httpx
import requests
from flask.testing import FlaskClient
from openapi_schema_validator import OAS30StrictValidator

METHODS = ("get", "put", "post", "delete", "patch")


class Document:
    """An OpenAPI document: the operation of a path, and a strict validator
    per response schema."""

    def __init__(self, spec):
        self.spec = spec
        self._validators = {}
        self._routes = []
        for path, item in spec.get("paths", {}).items():
            pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")
            literal = len(re.sub(r"\{[^}]+\}", "", path))
            self._routes.append((-literal, path, pattern, item))
        self._routes.sort(key=lambda route: route[:2])

    def operation(self, method, path):
        """(the document's path, its operation) for a request, or None."""
        for _, name, pattern, item in self._routes:
            if pattern.match(path):
                operation = item.get(method.lower())
                return (name, operation) if operation else None
        return None

    def problems(self, method, path, status, content_type, body):
        """What is wrong with an answer (a list of messages; empty: nothing
        or the document does not speak of it)."""
        found = self.operation(method, path)
        if found is None:
            return []
        name, operation = found
        answer = operation["responses"].get(str(status))
        if answer is None:
            return []
        content = answer.get("content", {}).get("application/json")
        if content is None:
            return []
        where = f"{method} {path} ({name}) {status}"
        if not (content_type or "").startswith("application/json"):
            return [f"{where}: Content-Type {content_type!r}, not application/json"]
        try:
            data = json.loads(body)
        except ValueError as exc:
            return [f"{where}: the body is not JSON: {exc}"]
        return [f"{where}: {error.message} at {'/'.join(map(str, error.absolute_path))}"
                for error in self.validator(name, method, status, content["schema"])
                .iter_errors(data)][:3]

    def validator(self, name, method, status, schema):
        key = (name, method.lower(), status)
        if key not in self._validators:
            # components beside the schema: its $refs ("#/components/...") resolve
            self._validators[key] = OAS30StrictValidator(
                {"allOf": [schema], "components": self.spec.get("components", {})},
                format_checker=OAS30StrictValidator.FORMAT_CHECKER)
        return self._validators[key]


def served_document(base_url):
    """The document a server serves, or None (not a metalboot API)."""
    try:
        with urllib.request.urlopen(base_url + "/v1/openapi.json", timeout=30) as answer:
            spec = json.load(answer)
    except (OSError, ValueError):
        return None
    return Document(spec) if isinstance(spec, dict) and "openapi" in spec else None


class Exchange:
    """One request and its answer, as a validator of HTTP exchanges reads them."""

    __slots__ = ("base", "method", "path", "query", "request_headers", "request_body",
                 "status", "headers", "body")

    def __init__(self, base, method, path, query, request_headers, request_body, status,
                 headers, body):
        self.base, self.method, self.path, self.query = base, method.upper(), path, query
        self.request_headers, self.request_body = dict(request_headers), request_body or b""
        self.status, self.headers, self.body = status, dict(headers), body or b""

    def as_json(self):
        def text(data):
            return data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        return {"method": self.method, "path": self.path, "query": self.query,
                "request_headers": self.request_headers,
                "request_body": text(self.request_body), "status": self.status,
                "headers": self.headers, "body": text(self.body)}


class Recorder:
    """The API exchanges of a test (see the module's docstring)."""

    def __init__(self):
        self.exchanges = []
        self.documents = {}  # by the base URL of a server, or a Flask app's id

    def install(self, monkeypatch):
        recorder = self
        flask_open = FlaskClient.open
        requests_send = requests.Session.send
        httpx_send = httpx.Client.send

        def open_(client, *args, **kwargs):
            response = flask_open(client, *args, **kwargs)
            request = response.request
            # (the request's body was read by the app: not recorded)
            recorder.add(("flask", id(client.application)), client.application,
                         request.method, request.path, request.query_string.decode(),
                         request.headers, b"", response.status_code,
                         response.headers, response.get_data())
            return response

        def send(session, request, **kwargs):
            response = requests_send(session, request, **kwargs)
            url = urlsplit(request.url)
            body = request.body.encode() if isinstance(request.body, str) else request.body
            recorder.add(f"{url.scheme}://{url.netloc}", None, request.method, url.path,
                         url.query, request.headers,
                         body if isinstance(body, bytes) else b"", response.status_code,
                         response.headers, response.content if not kwargs.get("stream")
                         else None)
            return response

        def send_httpx(client, request, **kwargs):
            response = httpx_send(client, request, **kwargs)
            response.read()
            url = request.url
            recorder.add(f"{url.scheme}://{url.netloc.decode()}", None, request.method,
                         url.path, url.query.decode(), request.headers, request.content,
                         response.status_code, response.headers, response.content)
            return response

        monkeypatch.setattr(FlaskClient, "open", open_)
        monkeypatch.setattr(requests.Session, "send", send)
        monkeypatch.setattr(httpx.Client, "send", send_httpx)

    def add(self, base, app, method, path, query, request_headers, request_body, status,
            headers, body):
        if not path.startswith("/v1/") or path == "/v1/openapi.json" or body is None:
            return
        if base not in self.documents:  # read while the server runs
            self.documents[base] = None
            self.documents[base] = Document(app.test_client().get(
                "/v1/openapi.json").get_json()) if app is not None else served_document(base)
        self.exchanges.append(Exchange(base, method, path, query, request_headers,
                                       request_body, status, headers, body))

    def problems(self):
        """What is wrong with the answers recorded (a list of messages)."""
        found = []
        for exchange in self.exchanges:
            document = self.documents[exchange.base]
            if document is not None:
                found += document.problems(exchange.method, exchange.path, exchange.status,
                                           exchange.headers.get("Content-Type")
                                           or exchange.headers.get("content-type"),
                                           exchange.body)
        return found
