"""How both artifact servers answer booting machines over HTTP.

metalboot-server's Flask blueprint (:mod:`metalboot_framework.api.boot`) and
metalboot-boot-server (:mod:`metalboot_framework.boot_server`) answer the same
four routes. What an answer is made of lives here once, free of either
framework: the routes and how a path matches them, Range and conditional
requests (werkzeug's rules, as ``send_file`` applies them), the headers of an
artifact, the error body, and which answers leave a fetch as evidence. Each
server only reads its request into :class:`Incoming`, finds the artifact its
own way (a query per request, or a cache) and sends the :class:`Reply` back.
What is served and to whom is decided in :mod:`metalboot_framework.artifacts`.
"""

import json
import operator
import os
from collections import namedtuple

from werkzeug import exceptions as wz_exceptions
from werkzeug.http import http_date, is_resource_modified, parse_etags, parse_range_header

from metalboot_framework import artifacts
from metalboot_framework.exceptions import Forbidden, Unauthorized

# -- routes -----------------------------------------------------------------------------
MACHINE_ARTIFACT = "/boot/<machine_id>/<interface>/<token>/<name>"
SCRIPT_BY_MAC = "/boot/mac/<mac>/<interface>/" + artifacts.SCRIPT_NAME
PARTITION_ARTIFACT = "/boot/partitions/<partition_id>/<interface>/<name>"
BOOT_REPORT = "/v1/machines/<machine_id>/boot-report"

_GET = frozenset(("GET", "HEAD"))


class Route(namedtuple("Route", "name methods length fixed values variables")):
    """A route as :func:`match` reads it: the number of its segments, its fixed
    segments (an itemgetter of their indexes, and their values) and an
    itemgetter of its variables."""

    @classmethod
    def of(cls, name, methods, rule):
        parts = rule.split("/")
        fixed = [i for i, part in enumerate(parts) if not part.startswith("<")]
        variables = [i for i, part in enumerate(parts) if part.startswith("<")]
        return cls(name, frozenset(methods), len(parts), operator.itemgetter(*fixed),
                   tuple(parts[i] for i in fixed), operator.itemgetter(*variables))


# Ranked as werkzeug ranks rules: those with more fixed segments first.
ROUTES = (Route.of("script_by_mac", _GET, SCRIPT_BY_MAC),
          Route.of("partition_artifact", _GET, PARTITION_ARTIFACT),
          Route.of("machine_artifact", _GET, MACHINE_ARTIFACT),
          Route.of("boot_report", ("POST",), BOOT_REPORT))
_BY_LENGTH = {}
for _route in ROUTES:
    _BY_LENGTH.setdefault(_route.length, []).append(_route)


def match(method, path):
    """(route name, its variables) for ``method`` and the percent-decoded
    ``path``, or None (the API's 404). Variables are ``[^{}/]+``: no empty
    segment, no brace; a route whose method differs does not match. On the
    path of every request: itemgetters, no loop over segments."""
    parts = path.split("/")
    routes = _BY_LENGTH.get(len(parts))
    if routes is None or "" in parts[1:] or "{" in path or "}" in path:
        return None
    for route in routes:
        if method in route.methods and route.fixed(parts) == route.values:
            variables = route.variables(parts)
            return route.name, variables if type(variables) is tuple else (variables,)
    return None


# -- requests and replies ---------------------------------------------------------------
Incoming = namedtuple("Incoming", "method headers remote")
Incoming.__doc__ = """What an answer reads of a request: its method, its headers
(a mapping whose ``get`` takes lower-case names) and the client's address."""

NOT_FOUND = wz_exceptions.NotFound.description


class Reply:
    """An answer to send: status, headers (a list of pairs), and bytes in
    memory or the span [start, stop) of an :class:`OpenFile`. The sender adds
    Content-Length (except to a 304) and the request id."""

    __slots__ = ("status", "headers", "body", "opened", "start", "stop")

    def __init__(self, status, headers, body=b"", opened=None, start=0, stop=0):
        self.status = status
        self.headers = headers
        self.body = body
        self.opened = opened
        self.start = start
        self.stop = stop

    @property
    def length(self):
        return self.stop - self.start if self.opened is not None else len(self.body)


def json_reply(status, document, headers=None):
    body = (json.dumps(document, separators=(",", ":")) + "\n").encode()
    out = [("Content-Type", "application/json")]
    out.extend(headers or ())
    return Reply(status, out, body)


def error_reply(code, message, fields=None, headers=None):
    """The API's error body: {"error": {"code", "message", "fields"}}."""
    return json_reply(code, {"error": {"code": code, "message": message,
                                       "fields": fields or {}}}, headers)


def metalboot_error_reply(exc):
    """A :class:`MetalbootError` as the API answers it (a 401 with its challenge)."""
    headers = [("WWW-Authenticate", 'Bearer realm="metalboot"')] if exc.code == 401 \
        else None
    return error_reply(exc.code, exc.message, exc.fields, headers)


# -- artifacts ----------------------------------------------------------------------------
class OpenFile:
    """A file artifact opened once: its stat, ETag and file object.

    pread() reads at explicit offsets, so one file object serves every
    response at once, with the bytes of the stat its ETag and length come
    from; it is closed when the last of them lets go of it (or by
    :meth:`close`)."""

    __slots__ = ("stat", "etag", "file")

    def __init__(self, path):
        self.file = open(path, "rb")  # noqa: SIM115 (kept open on purpose)
        self.stat = os.fstat(self.file.fileno())
        self.etag = artifacts.file_etag(path, self.stat)

    def close(self):
        self.file.close()


class ShortFile(Exception):
    """A file artifact that gave fewer bytes than its stat promised."""

    def __init__(self, opened, offset, count, got):
        super().__init__(f"{opened.file.name}: {got} bytes at offset {offset} instead of "
                         f"{count}: the file changed since it was opened")


#: the bytes of a file artifact read and sent at a time, by both servers
FILE_CHUNK = 256 * 1024


def read_span(opened, offset, count):
    """``count`` bytes of ``opened`` at ``offset``; ShortFile if the file has fewer."""
    data = os.pread(opened.file.fileno(), count, offset)
    if len(data) != count:
        raise ShortFile(opened, offset, count, len(data))
    return data


class Answer:
    """An artifact as it is answered: its ETag, its :class:`OpenFile` (None for
    bytes in memory) and the headers of every 200 for it, built once."""

    __slots__ = ("artifact", "opened", "etag", "headers", "content_type", "last_modified")

    def __init__(self, artifact, name, opened=None):
        self.artifact = artifact
        self.opened = opened
        self.etag = opened.etag if opened else artifacts.content_etag(artifact.content)
        self.content_type = artifacts.content_type(artifact)
        self.last_modified = http_date(int(opened.stat.st_mtime)) if opened else None
        # the headers a 304 keeps too (werkzeug's rule: no entity headers)
        self.headers = [("Content-Disposition", artifacts.content_disposition(name)),
                        ("ETag", f'"{self.etag}"'), ("Accept-Ranges", "bytes"),
                        ("Cache-Control", "no-cache" if opened else "no-cache, max-age=0")]

    @classmethod
    def of(cls, artifact, name):
        """The Answer of an artifact; opens its file, if it has one (blocking)."""
        return cls(artifact, name, OpenFile(artifact.path) if artifact.path else None)


# Request headers that make an artifact answer conditional (werkzeug's rules).
_CONDITIONAL = ("range", "if-none-match", "if-match", "if-modified-since",
                "if-unmodified-since", "if-range")


class _Conditional(Exception):
    """A conditional request answered without the artifact's bytes (304, 412)."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _conditional(request, etag, length, last_modified=None):
    """Apply Range and the If-* headers as werkzeug does for send_file: the
    (start, stop, Content-Range) to send, None for the whole artifact; raises
    _Conditional (304/412) or werkzeug's RequestedRangeNotSatisfiable (416)."""
    headers = request.headers
    environ = {"REQUEST_METHOD": request.method}
    for name in _CONDITIONAL:
        value = headers.get(name)
        if value is not None:
            environ["HTTP_" + name.upper().replace("-", "_")] = value
    if len(environ) == 1:  # none of them: the whole artifact (the common case)
        return None
    if "HTTP_RANGE" in environ and length and (
            "HTTP_IF_RANGE" not in environ or not is_resource_modified(
                environ, etag, None, last_modified, ignore_if_range=False)):
        parsed = parse_range_header(environ["HTTP_RANGE"])
        span = parsed.range_for_length(length) if parsed else None
        content_range = parsed.to_content_range_header(length) if parsed else None
        if span is None or content_range is None:
            raise wz_exceptions.RequestedRangeNotSatisfiable(length)
        return span[0], span[1], content_range
    if not is_resource_modified(environ, etag, None, last_modified):
        raise _Conditional(412 if parse_etags(environ.get("HTTP_IF_MATCH")) else 304)
    return None


def artifact_reply(request, answer, now_date):
    """The answer to a GET or HEAD of ``answer``: the whole artifact, a range
    of it, or a 304/412, with the headers Flask's send_file gives; raises
    werkzeug's RequestedRangeNotSatisfiable (416). ``now_date``: the HTTP date
    of now (an in-memory artifact expires at once)."""
    headers = answer.headers.copy()
    opened = answer.opened
    if opened is None:
        headers.append(("Expires", now_date))
        length = len(answer.artifact.content)
    else:
        length = opened.stat.st_size
    try:
        span = _conditional(request, answer.etag, length, answer.last_modified)
    except _Conditional as conditional:
        # no entity headers but Expires on a 304 (werkzeug's rule)
        return Reply(conditional.status, headers)
    headers.append(("Content-Type", answer.content_type))
    if answer.last_modified is not None:
        headers.append(("Last-Modified", answer.last_modified))
    start, stop = (0, length) if span is None else span[:2]
    status = 200
    if span is not None:
        headers.append(("Content-Range", span[2]))
        status = 206
    if opened is not None:
        return Reply(status, headers, opened=opened, start=start, stop=stop)
    content = answer.artifact.content
    return Reply(status, headers, content if span is None else content[start:stop])


def fetch_reply(request, answer, machine_id, interface, name, now_date, bound=True,
                by_mac=None, timed=True):
    """(the :class:`Reply` to a fetch of a per-machine artifact, the evidence
    row it leaves or None): an answer that gave the artifact, a part of it or
    "you have it" is a fetch (:data:`artifacts.EVIDENCE_STATUSES`). The
    server commits the row before it sends the reply."""
    reply = artifact_reply(request, answer, now_date)
    if reply.status not in artifacts.EVIDENCE_STATUSES:
        return reply, None
    return reply, artifacts.fetch_evidence(machine_id, interface, name, request.remote,
                                           request.headers.get("range"), timed=timed,
                                           bound=bound, by_mac=by_mac)


# -- boot reports -----------------------------------------------------------------------
def _body_token(raw):
    """The "token" of a body that is a JSON object with a string there, else None
    (whether the body is valid is said only after the token is checked)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    token = data.get("token") if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


def report_token(request, raw, api_role):
    """The machine token of a boot report, read before anything is said about
    its body: the bearer token, else the body's ``token`` field. Unauthorized
    without either, Forbidden for an API token (``api_role`` names its role)."""
    token = artifacts.bearer_token(request.headers.get("authorization")) or _body_token(raw)
    if token is None:
        raise Unauthorized("a boot report needs the machine's token: a bearer token or "
                           "the body's token field")
    if api_role(token) is not None:
        raise Forbidden("a boot report takes the machine's own token, not an API token")
    return token


def report_reply(machine_id, evidence_id):
    return json_reply(201, {"machine_id": machine_id, "evidence_id": evidence_id})
