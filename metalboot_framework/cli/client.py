"""A small HTTP client of the metalboot REST API (requests only).

Every failure becomes one :class:`CliError` with the exit code the CLI
documents (see ``doc/cli.rst``) and a one-line message; nothing here imports
the server's store or conductor.
"""

import urllib.parse

import click
import requests

# Exit codes (documented in doc/cli.rst and in ``metalboot --help``).
EXIT_OK = 0
EXIT_FAILED = 1        # the API answered with an error, or a migration failed
EXIT_USAGE = 2         # click's own code for bad flags and arguments
EXIT_CONNECTION = 3    # the server could not be reached
EXIT_AUTH = 4          # 401 / 403: no token, unknown token, reader token for a change


def segment(value):
    """``value`` as one segment of a URL path: ``machines delete ../partitions/p1``
    must name a machine that does not exist, not the partition."""
    quoted = urllib.parse.quote(str(value), safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


class CliError(click.ClickException):
    """One clear line on stderr and an exit code."""

    def __init__(self, message, exit_code=EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None):
        click.echo(f"metalboot: error: {self.format_message()}", err=True)


class ApiError(CliError):
    """The API answered {"error": {"code", "message", "fields"}}."""

    def __init__(self, status, message, fields=None, method="", path=""):
        self.status = status
        self.api_message = message
        self.fields = fields or {}
        self.method = method
        self.path = path
        exit_code = EXIT_AUTH if status in (401, 403) else EXIT_FAILED
        super().__init__(self._line(), exit_code)

    def _line(self):
        line = f"{self.api_message} (HTTP {self.status})"
        details = []
        for name, messages in sorted(self.fields.items()):
            if isinstance(messages, (list, tuple)):
                text = " ".join(str(m) for m in messages)
            else:
                text = str(messages)
            details.append(f"{name}: {text}" if text else name)
        if details:
            line += "; fields: " + "; ".join(details)
        return " ".join(line.split())  # one line, whatever the server sent


class Client:
    """Calls the API at ``url`` with bearer ``token``; returns decoded JSON."""

    def __init__(self, url, token=None, timeout=30.0):
        self.url = _checked_url(url).rstrip("/")
        self.token = token
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "metalboot-cli"
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def request(self, method, path, params=None, json=None, expect_json=True):
        url = self.url + path
        try:
            response = self.session.request(method, url, params=params, json=json,
                                            timeout=self.timeout)
        except requests.exceptions.SSLError as exc:
            raise CliError(f"TLS error talking to {self.url}: {_reason(exc)}",
                           EXIT_CONNECTION) from None
        except requests.exceptions.Timeout:
            raise CliError(f"no answer from {self.url} within {self.timeout:g} s",
                           EXIT_CONNECTION) from None
        except requests.exceptions.ConnectionError as exc:
            raise CliError(f"cannot connect to {self.url}: {_reason(exc)}",
                           EXIT_CONNECTION) from None
        except requests.exceptions.RequestException as exc:
            raise CliError(f"request to {url} failed: {_reason(exc)}",
                           EXIT_CONNECTION) from None
        if response.status_code >= 400:
            raise self._error(response, method, path)
        if response.status_code == 204 or not expect_json:
            return None
        try:
            return response.json()
        except ValueError:
            raise CliError(f"{method} {url} answered {response.status_code} with something "
                           f"that is not JSON; is {self.url} a metalboot API?") from None

    def _error(self, response, method, path):
        try:
            body = response.json()
            error = body["error"]
            return ApiError(int(error.get("code") or response.status_code),
                            str(error.get("message") or response.reason),
                            error.get("fields") or {}, method, path)
        except (ValueError, KeyError, TypeError, AttributeError):
            message = f"{method} {path} failed: {response.status_code} {response.reason}"
            if response.status_code == 404:
                message += f" (is {self.url} a metalboot API?)"
            return ApiError(response.status_code, message, None, method, path)

    def get(self, path, **params):
        return self.request("GET", path, params={k: v for k, v in params.items()
                                                 if v is not None})

    def post(self, path, json=None):
        return self.request("POST", path, json=json if json is not None else {})

    def patch(self, path, json):
        return self.request("PATCH", path, json=json)

    def delete(self, path):
        return self.request("DELETE", path)

    def pages(self, path, key, marker_param="marker", page_size=1000, limit=None, **params):
        """Every item of a paged collection (follows next_marker)."""
        marker = None
        count = 0
        while True:
            query = dict(params, limit=page_size)
            if marker is not None:
                query[marker_param] = marker
            body = self.get(path, **query)
            for item in body.get(key, []):
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            marker = body.get("next_marker")
            if marker is None:
                return


def _checked_url(url):
    """``url`` if it is an http(s) URL of a server; else a usage error naming it
    (whether it came from --url, METALBOOT_URL or the config file)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as exc:
        raise CliError(f"the API URL {url!r} is not valid: {exc}", EXIT_USAGE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CliError(f"the API URL {url!r} is not an http(s) URL of a server, e.g. "
                       f"http://127.0.0.1:6480", EXIT_USAGE)
    if parts.query or parts.fragment:
        raise CliError(f"the API URL {url!r} has a query or fragment", EXIT_USAGE)
    if parts.path.rstrip("/").endswith("/v1"):  # a path is fine (a proxy's prefix)
        raise CliError(f"give the API URL without /v1 (the commands add it): "
                       f"{url.rstrip('/')[:-3]}", EXIT_USAGE)
    return url


def _reason(exc):
    """The innermost, readable reason of a requests exception (no repr soup)."""
    seen = exc
    while getattr(seen, "__context__", None) is not None or getattr(seen, "reason", None):
        inner = getattr(seen, "reason", None)
        if isinstance(inner, BaseException):
            seen = inner
            continue
        if seen.__context__ is not None and seen.__context__ is not seen:
            seen = seen.__context__
            continue
        break
    text = str(seen)
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text \
            or "Temporary failure in name resolution" in text:
        return "host name not found"
    if "No route to host" in text:
        return "no route to host"
    # urllib3 messages end in the useful part, e.g. "...: [Errno 113] ..."
    return text.rsplit(": ", 1)[-1].strip(" )'\"") or type(seen).__name__
