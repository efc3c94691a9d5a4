"""The agent's calls of the control plane's API: the partition's boot data,
its change feed, its artifacts and the delivery of evidence, with the
partition's agent token (``[agent] token_file``, read again after a 401 so
that a rotated token is picked up without a restart)."""

import base64
import hashlib
import logging
import os
import threading

import requests

from metalboot_framework import __version__

LOG = logging.getLogger(__name__)


class ApiError(Exception):
    """The API could not be reached or gave no usable answer."""


class Gone(ApiError):
    """410: the change feed no longer has the cursor asked for."""


class NotThere(ApiError):
    """404: no such artifact."""


class ApiClient:
    """One requests session per thread (long polls, delivery and artifact
    downloads run in threads of their own)."""

    def __init__(self, base_url, token_file, timeout=10.0):
        self.base_url = base_url.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        self._token = None
        self._local = threading.local()

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers["User-Agent"] = f"metalboot-boot-agent/{__version__}"
        return session

    def token(self, partition=None, reread=False):
        """The token for ``partition``: the file holds one token, or one line
        ``<partition> <token>`` per partition (a token is valid for one
        partition only), or both (the lone token for the others)."""
        if self._token is None or reread:
            self._token = self._read_tokens()
        found = self._token.get(partition) or self._token.get(None)
        if not found:
            raise ApiError(f"[agent] token_file {self.token_file} has no token for "
                           f"partition {partition}")
        return found

    def _read_tokens(self):
        try:
            with open(self.token_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise ApiError(f"cannot read [agent] token_file {self.token_file}: "
                           f"{exc.strerror}") from None
        tokens = {}
        for line in lines:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if len(words) == 1:
                tokens[None] = words[0]
            else:
                tokens[words[0]] = words[1]
        return tokens

    def _call(self, method, partition, path, timeout=None, stream=False, **kw):
        """The response of a call about ``partition`` (2xx; NotThere for a 404,
        Gone for a 410); ApiError for anything else. A 401 is tried once more
        with the token file read again."""
        url = f"{self.base_url}/v1/partitions/{partition}/boot-data{path}"
        for attempt in range(2):
            headers = {"Authorization": f"Bearer {self.token(partition, attempt > 0)}"}
            try:
                r = self._session().request(method, url, headers=headers, stream=stream,
                                            timeout=timeout or self.timeout, **kw)
            except requests.RequestException as exc:
                raise ApiError(f"{method} {url}: {exc}") from None
            if r.status_code == 401 and attempt == 0:
                r.close()
                continue
            if r.status_code == 410:
                raise Gone(_message(r))
            if r.status_code == 404:
                raise NotThere(_message(r))
            if not 200 <= r.status_code < 300:
                raise ApiError(f"{method} {url}: {r.status_code} {_message(r)}")
            return r
        raise AssertionError("unreachable")

    def boot_data(self, partition):
        return self._call("GET", partition, "").json()

    def changes(self, partition, since, wait):
        return self._call("GET", partition, "/changes", params={"since": since, "wait": wait},
                          timeout=self.timeout + wait).json()

    def deliver(self, partition, agent, journal, records):
        return self._call("POST", partition, "/evidence",
                          json={"agent": agent, "journal": journal, "records": records}).json()

    def dhcp_report(self, partition, body):
        return self._call("POST", partition, "/dhcp", json=body).json()

    def download(self, partition, interface, name, path):
        """Write the partition artifact to ``path`` (via a temporary file,
        fsync'ed) if its SHA-256 is the one the API sent; its Content-Type."""
        r = self._call("GET", partition, f"/artifacts/{interface}/{name}", stream=True)
        expected = _expected_digest(r.headers)
        digest = hashlib.sha256()
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            with r, open(tmp, "wb") as f:
                for chunk in r.iter_content(256 * 1024):
                    digest.update(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            if expected is None:
                raise ApiError(f"artifact {partition}/{interface}/{name} came without a "
                               "digest")
            if digest.hexdigest() != expected:
                raise ApiError(f"artifact {partition}/{interface}/{name}: SHA-256 "
                               f"{digest.hexdigest()}, the API said {expected}")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return r.headers.get("Content-Type", "application/octet-stream")


def _expected_digest(headers):
    """The SHA-256 (hex) the API gives: X-Content-SHA256, else Digest: sha-256=."""
    hexed = headers.get("X-Content-SHA256")
    if hexed:
        return hexed.strip().lower()
    for part in (headers.get("Digest") or "").split(","):
        algorithm, _, value = part.strip().partition("=")
        if algorithm.lower() == "sha-256" and value:
            return base64.b64decode(value).hex()
    return None


def _message(r):
    try:
        return r.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return r.text[:200]
