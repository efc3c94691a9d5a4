"""The boot server's RSGI application: granian hands it each request, it
answers through :mod:`metalboot_framework.boot_endpoints` (the routes, Range
and conditional requests, headers and errors the Flask blueprint answers
with too), reading what it needs from its *source* and committing each
fetch's evidence to its *sink* before the answer leaves.

metalboot-boot-server gives it :class:`~.cache.BootCache` (the database) and
:class:`~.evidence.EvidenceWriter`; the partition's boot agent
(:mod:`metalboot_framework.agent`) gives it the replicated partition data and
its local evidence journal. A source has:

- ``snapshots``, ``macs``, ``partition_artifacts``: caches with
  ``cached(key)`` (a value or :data:`~.cache.MISS`) and ``async get(key)``:
  a machine's :class:`~.cache.Snapshot` by id, a machine id by (MAC,
  interface), an :class:`~metalboot_framework.boot_endpoints.Answer` by
  (partition, interface, name); None: there is none;
- ``reads``: the executor of blocking calls (plugin artifacts, report checks);
- ``authenticate_report(machine_id, token)`` (blocking), as
  :func:`metalboot_framework.artifacts.authenticate_report`;
- ``unavailable(partition_id)``: None, or why the data of the partition
  (None: of an unknown machine) must not be served now (503);
- ``start()``, ``async stop()``, ``shutdown()``.

A sink is a :class:`~.evidence.GroupCommit`."""

import asyncio
import itertools
import logging
import os
import re
import secrets
import time
import urllib.parse

from granian.rsgi import ProtocolClosed as RSGIProtocolClosed
from werkzeug import exceptions as wz_exceptions
from werkzeug.http import http_date

from metalboot_framework import artifacts, boot_endpoints, logs
from metalboot_framework.api import auth, bearer_tokens, spec
from metalboot_framework.api.schemas import BootReportSchema, canonical_machine_id
from metalboot_framework.boot_endpoints import Answer, ShortFile
from metalboot_framework.boot_server.cache import MISS, BootCache
from metalboot_framework.boot_server.evidence import EvidenceWriter
from metalboot_framework.exceptions import MetalbootError

LOG = logging.getLogger(__name__)
ACCESS_LOG = logging.getLogger("metalboot_framework.boot_server.access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class Request:
    """What the answers read of a request: granian's RSGI scope, plus the
    client's address without its port (an :class:`Incoming` too)."""

    __slots__ = ("scope", "proto", "method", "path", "headers", "remote")

    def __init__(self, scope, proto):
        self.scope = scope
        self.proto = proto
        self.method = scope.method
        self.path = scope.path  # percent-decoded, as werkzeug's PATH_INFO
        self.headers = scope.headers  # names in lower case
        # "10.0.0.1:port" or "[fd00::1]:port"
        self.remote = scope.client.rpartition(":")[0].strip("[]")

    async def body(self, limit):
        """The request body; RequestTooLarge past ``limit`` bytes."""
        length = self.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise RequestTooLarge()
        chunks, size = [], 0
        async for chunk in self.proto:
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge()
            chunks.append(chunk)
        return b"".join(chunks)


def _unavailable_reply(reason):
    """503: the source's data is not to be served now (a client retries)."""
    return boot_endpoints.error_reply(503, reason, headers=[("Retry-After", "5")])


class RequestTooLarge(Exception):
    """A request body larger than ``[api] max_request_body_size``."""


class BootServer:
    """The RSGI application and what it keeps between requests."""

    def __init__(self, services, opts, max_body_size, source=None, sink=None, extra=None):
        """``source`` and ``sink`` (see above): by default the database's.
        ``extra``: {path: coroutine function(request) -> Reply} answering GET
        and HEAD of further paths (the agent's /healthz)."""
        self.extra = extra or {}
        self.services = services
        self.opts = opts
        self.max_body_size = max_body_size
        self.cache = source if source is not None else BootCache(services, opts)
        self.evidence = sink if sink is not None else EvidenceWriter(
            services, opts.evidence_batch_size, opts.evidence_batch_wait,
            log_rows=opts.access_log)
        # Templates are read once: no stat() of the template file per rendering.
        services.templates.auto_reload = False
        self._id_prefix = secrets.token_hex(4)
        self._ids = itertools.count()
        self._expires = (0, "")
        self._api_tokens = bearer_tokens.known_api_tokens(services.conf)

    # -- the RSGI application ---------------------------------------------------------
    async def __rsgi__(self, scope, proto):
        """Every request: answered by :meth:`handle`, then sent (and logged)."""
        try:
            request = Request(scope, proto)
            reply = await self.handle(request)
            try:
                await self._send(request, reply)
            except (ConnectionError, RSGIProtocolClosed):
                pass  # the client went away; its evidence (if any) is committed
            except ShortFile as exc:  # nothing was sent yet
                reply = self._internal_error(request, exc)
                await self._send(request, reply)
        except Exception:  # what granian would answer 500 without a word in our log
            LOG.exception("request %s %s failed unexpectedly", scope.method, scope.path)
            raise
        if self.opts.access_log:
            path = logs.redact(request.path + (f"?{scope.query_string}"
                                               if scope.query_string else ""))
            ACCESS_LOG.info("%s %s %s %d %d", request.remote, request.method, path,
                            reply.status, reply.length,
                            extra={"http_method": request.method, "path": path,
                                   "status": reply.status, "remote_addr": request.remote})

    def _request_id(self, request):
        given = request.headers.get("x-request-id")
        if given and _REQUEST_ID.fullmatch(given):
            return given
        # unique like the API's random ids, without a system call per request
        return f"{self._id_prefix}{next(self._ids) & 0xFFFFFFFF:08x}"

    def _internal_error(self, request, exc=None):
        """A 500 naming the request id that the log line names too."""
        request_id = self._request_id(request)
        if exc is None:
            LOG.exception("request %s failed unexpectedly", request_id)
        else:
            LOG.error("request %s: %s", request_id, exc)
        reply = boot_endpoints.error_reply(
            500, f"internal error; see the server log for request {request_id}")
        reply.headers.append(("X-Request-Id", request_id))
        return reply

    async def _send(self, request, reply):
        """The reply's headers and bytes; a file span in chunks read by pread()
        (the stream waits for the client at each chunk); no bytes to a HEAD.
        A file shorter than its stat said (changed on disk since it was
        opened) raises ShortFile before anything is sent, else ends the
        connection short of the length announced."""
        proto = request.proto
        headers = reply.headers
        if reply.status != 304:
            headers.append(("Content-Length", str(reply.length)))
        if reply.status != 500:  # a 500 has the id its log line names
            headers.append(("X-Request-Id", self._request_id(request)))
        head = request.method == "HEAD"
        if reply.opened is None or head or not reply.length:
            proto.response_bytes(reply.status, headers, b"" if head else reply.body)
            return
        offset, count = reply.start, reply.length
        if count <= boot_endpoints.FILE_CHUNK:  # one read, one send (a 256 KiB range)
            proto.response_bytes(reply.status, headers,
                                 boot_endpoints.read_span(reply.opened, offset, count))
            return
        fd = reply.opened.file.fileno()
        stream = proto.response_stream(reply.status, headers)
        while count:
            chunk = os.pread(fd, min(count, boot_endpoints.FILE_CHUNK), offset)
            if not chunk:
                raise ConnectionResetError("the file is shorter than it was")
            await stream.send_bytes(chunk)
            offset, count = offset + len(chunk), count - len(chunk)

    async def handle(self, request):
        """The routes of :mod:`metalboot_framework.boot_endpoints` on the
        percent-decoded path; for any other path and method, the API's 404."""
        try:
            expect = request.headers.get("expect")
            if expect is not None and expect.lower() != "100-continue" and \
                    request.scope.http_version == "1.1":
                return boot_endpoints.error_reply(417, f"unknown Expect: {expect}")
            if "\x00" in request.path:
                return boot_endpoints.error_reply(
                    404, "not found: the path contains a NUL character")
            found = boot_endpoints.match(request.method, request.path)
            if found is None and request.path in self.extra and \
                    request.method in ("GET", "HEAD"):
                return await self.extra[request.path](request)
            if found is None:
                return boot_endpoints.error_reply(404, boot_endpoints.NOT_FOUND)
            route, variables = found
            if route == "machine_artifact":
                return await self.machine_artifact(request, *variables)
            if route == "script_by_mac":
                return await self.script_by_mac(request, *variables)
            if route == "partition_artifact":
                return await self.partition_artifact(request, *variables)
            return await self.boot_report(request, canonical_machine_id(variables[0]))
        except Exception:
            return self._internal_error(request)

    # -- the answers -------------------------------------------------------------------
    def _now_date(self):
        now = int(time.time())
        if self._expires[0] != now:
            self._expires = (now, http_date(now))
        return self._expires[1]

    async def machine_artifact(self, request, machine_id, interface, token, name):
        if interface not in self.services.interfaces:
            return boot_endpoints.metalboot_error_reply(artifacts.not_found())
        snapshots = self.cache.snapshots
        snapshot = snapshots.cached(machine_id)
        if snapshot is MISS:
            snapshot = await snapshots.get(machine_id)
        refused = self._unavailable(snapshot)
        if refused is not None:
            return refused
        return await self._fetch(request, snapshot, interface, token, name)

    def _unavailable(self, snapshot):
        """The 503 to answer instead, if the source says its data of the
        machine's partition (or, for an unknown machine, of any) is not to be
        served now."""
        reason = self.cache.unavailable(
            snapshot.partition.id if snapshot is not None else None)
        return None if reason is None else _unavailable_reply(reason)

    async def script_by_mac(self, request, mac, interface):
        machine_id = await self.cache.macs.get((artifacts.normalize_mac(mac), interface))
        snapshot = await self.cache.snapshots.get(machine_id) \
            if machine_id is not None else None
        refused = self._unavailable(snapshot)
        if refused is not None:
            return refused
        if snapshot is None:
            return boot_endpoints.metalboot_error_reply(artifacts.not_found())
        binding = artifacts.mac_binding(self.services, snapshot.machine, request.remote)
        token = snapshot.token(self.services, interface) if binding != artifacts.UNBOUND \
            else artifacts.script_token(self.services, snapshot.machine, interface, binding)
        return await self._fetch(request, snapshot, interface, token,
                                 artifacts.SCRIPT_NAME, by_mac=binding)

    async def _fetch(self, request, snapshot, interface, token, name, by_mac=None):
        """Check access, choose the artifact, record the fetch, then answer."""
        machine = snapshot.machine if snapshot is not None else None
        try:
            bound = artifacts.check_access(
                self.services, machine, interface, token, name, request.remote,
                snapshot.token(self.services, interface) if snapshot is not None else None)
            if name == artifacts.SCRIPT_NAME:
                answer = snapshot.script(self.services, interface, token)
            else:
                answer = await asyncio.get_running_loop().run_in_executor(
                    self.cache.reads, lambda: Answer.of(artifacts.plugin_artifact(
                        self.services, machine, snapshot.partition, interface, name), name))
            reply, row = boot_endpoints.fetch_reply(
                request, answer, machine.id, interface, name, self._now_date(), bound=bound,
                by_mac=by_mac, timed=False)
        except MetalbootError as exc:
            return boot_endpoints.metalboot_error_reply(exc)
        except wz_exceptions.HTTPException as exc:
            return boot_endpoints.error_reply(exc.code, exc.description)
        if row is not None:
            await self.evidence.add(row)
        return reply

    async def partition_artifact(self, request, partition_id, interface, name):
        reason = self.cache.unavailable(partition_id)
        if reason is not None:
            return _unavailable_reply(reason)
        try:
            answer = await self.cache.partition_artifacts.get((partition_id, interface, name))
        except MetalbootError as exc:
            return boot_endpoints.metalboot_error_reply(exc)
        if answer is None:
            return boot_endpoints.metalboot_error_reply(artifacts.not_found())
        try:
            return boot_endpoints.artifact_reply(request, answer, self._now_date())
        except wz_exceptions.HTTPException as exc:
            return boot_endpoints.error_reply(exc.code, exc.description)

    async def boot_report(self, request, machine_id):
        try:
            # the checks, messages and order of the API's @endpoint: the token
            # first, then the body, then the query
            raw = await request.body(self.max_body_size)
            token = boot_endpoints.report_token(request, raw, self._api_role)
            found = await asyncio.get_running_loop().run_in_executor(
                self.cache.reads, self.cache.authenticate_report, machine_id, token)
            content_type = request.headers.get("content-type")
            mimetype = content_type.split(";", 1)[0].strip().lower() \
                if content_type is not None else ""
            body, _ = spec.load_body(BootReportSchema, mimetype, raw)
            spec.reject_query({k for k, _ in urllib.parse.parse_qsl(
                request.scope.query_string, keep_blank_values=True)})
            bound = artifacts.report_binding(self.services, found, body["boot_interface"])
        except MetalbootError as exc:
            return boot_endpoints.metalboot_error_reply(exc)
        except RequestTooLarge:
            return boot_endpoints.error_reply(413, "the request body is larger than [api] "
                                                   "max_request_body_size allows")
        evidence_id = await self.evidence.add(
            artifacts.report_evidence(machine_id, body, request.remote, timed=False,
                                      bound=bound),
            with_id=True)
        return boot_endpoints.report_reply(machine_id, evidence_id)

    def _api_role(self, token):
        return auth.role_among(self._api_tokens, token)

    # -- start and stop ----------------------------------------------------------------
    async def start(self):
        self.cache.start()
        self.evidence.start()

    async def stop(self):
        await self.cache.stop()
        await self.evidence.close()
        LOG.info("%s", self.evidence.summary())
        self.cache.shutdown()
