"""One sushy connection per BMC (address + username), reused from a cache.

sushy retries on its own (connection errors up to three times two seconds apart,
GETs with 5xx ten times); :class:`SingleShotConnector` turns that off so that
:mod:`metalboot_framework.bmc.retry` alone decides, with its configured backoff.
"""

import collections
import hashlib
import logging
import threading
import time
import urllib.parse

import requests
import requests.adapters
import sushy
from sushy import connector as sushy_connector

from metalboot_framework.bmc import redact
from metalboot_framework.exceptions import InvalidInput

LOG = logging.getLogger(__name__)

ROOT_PREFIX = "/redfish/v1/"

#: Requests one connection sends to its BMC at the same time, unless ``[bmc]
#: max_requests_per_bmc`` says otherwise: requests' default pool size. A BMC
#: managing several systems (a chassis manager, sushy-tools) serves the steps of
#: several machines at once; a BMC of one system sees one request at a time
#: anyway, since a machine runs one step at a time.
MAX_REQUESTS_PER_BMC = requests.adapters.DEFAULT_POOLSIZE


class SingleShotConnector(sushy_connector.Connector):
    """A sushy connector that sends each request exactly once."""

    def __init__(self, url, pool_size=MAX_REQUESTS_PER_BMC, **kwargs):
        # server_side_retries=1 makes sushy's connection loop a single attempt;
        # _op below makes its 5xx handling retry-free.
        super().__init__(url, server_side_retries=1, server_side_retries_delay=0, **kwargs)
        if pool_size != requests.adapters.DEFAULT_POOLSIZE:
            # as many pooled sockets as requests may be under way (else urllib3
            # warns "connection pool is full" for each one above its default)
            adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=pool_size)
            self._session.mount("https://", adapter)
            self._session.mount("http://", adapter)

    def _op(self, method, path="", data=None, headers=None, blocking=False, timeout=None,
            server_side_retries_left=None, allow_reauth=True, **kwargs):
        if server_side_retries_left is None:
            server_side_retries_left = 0
        try:
            return super()._op(method, path, data=data, headers=headers, blocking=blocking,
                               timeout=timeout,
                               server_side_retries_left=server_side_retries_left,
                               allow_reauth=allow_reauth, **kwargs)
        except sushy.exceptions.SushyError as exc:
            # the request that failed, for the error message (see retry.request_of):
            # set once, by the innermost request (a PATCH sent again without ETag)
            if getattr(exc, "request", None) is None:
                exc.request = f"{method} {urllib.parse.urlsplit(path).path or path or '/'}"
            raise

    def check_retry_on_exception(self, exception_msg):
        return False  # our retry policy (and the quirk table) decides

    def patch(self, path="", data=None, headers=None, etag=None, blocking=False,
              timeout=None, **kwargs):
        """One PATCH, with ``If-Match: etag`` when given. sushy's own answer to
        a 412 (send it again without If-Match) would overwrite what changed
        since the read, and a BMC that requires the header (Lenovo XCC: 428)
        refuses it: the caller reads the resource again instead (see
        :func:`is_stale_etag`)."""
        headers = dict(headers or {})
        if etag:
            headers["If-Match"] = etag
        return self._op("PATCH", path, data=data, headers=headers, blocking=blocking,
                        timeout=timeout, **kwargs)


def is_stale_etag(exc):
    """The BMC answered 412: the resource changed since the read whose ETag
    the PATCH carried (RFC 9110 13.1.1)."""
    return isinstance(exc, sushy.exceptions.HTTPError) and exc.status_code == 412


def base_url(address):
    """``https://host[:port]`` from a BMC address (bare host defaults to https).

    Refuses addresses carrying credentials, which would end up in messages.
    """
    if not address:
        raise InvalidInput("BMC address is empty", fields={"bmc.address": ["required"]})
    text = address.strip()
    if "://" not in text:
        text = "https://" + text
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https"):
        raise InvalidInput(f"BMC address {address!r}: scheme must be http or https",
                           fields={"bmc.address": ["scheme must be http or https"]})
    if parsed.username or parsed.password:
        raise InvalidInput("BMC address must not contain credentials; set bmc.username "
                           "and bmc.password instead",
                           fields={"bmc.address": ["must not contain credentials"]})
    if not parsed.hostname:
        raise InvalidInput(f"BMC address {address!r} has no host",
                           fields={"bmc.address": ["no host"]})
    return f"{parsed.scheme}://{parsed.netloc}"


def read_service_root(url, verify, timeout):
    """The service root of the BMC at ``url`` as read without credentials
    (DSP0266: it requires none), or None where it cannot be read."""
    try:
        response = requests.get(url + ROOT_PREFIX, verify=verify, timeout=timeout,
                                headers={"Accept": "application/json"})
        data = response.json() if response.ok else None
    except (requests.RequestException, ValueError):
        return None
    return data if isinstance(data, dict) else None


class RequestSlots:
    """At most ``size`` requests at once; a thread that holds a slot may nest."""

    def __init__(self, size):
        self.size = size
        self._slots = threading.BoundedSemaphore(size)
        self._held = threading.local()

    def __enter__(self):
        depth = getattr(self._held, "depth", 0)
        if not depth:
            self._slots.acquire()
        self._held.depth = depth + 1
        return self

    def __exit__(self, *exc):
        self._held.depth -= 1
        if not self._held.depth:
            self._slots.release()


class Connection:
    """A connector plus the sushy root, read when first needed; send requests
    inside ``with slots`` (the BMC's, shared with the connections that replace
    this one).

    The service root is read only for what needs it (finding the only system
    of a BMC, building a sushy resource): a machine whose system is named
    (``redfish_system_id``) is migrated without it.

    ``facts`` holds what does not change while the connection lives and would
    otherwise be read again by every step: per system path, its vendor quirks,
    the path of its VirtualMedia collection and which devices take a CD
    (``(path, name) -> value``). They go with the connection (TTL, a changed
    password, a connection or authentication error).
    """

    def __init__(self, url, username, open_root, connector, fingerprint, slots):
        self.url = url
        self.username = username
        self._open_root = open_root
        self._root = None
        self._root_lock = threading.Lock()
        self.connector = connector
        self.fingerprint = fingerprint
        self.created = time.monotonic()
        self.slots = slots
        self.facts = {}

    @property
    def root(self):
        """The sushy root (GET of the service root, once per connection)."""
        if self._root is None:
            # the slot first (a request like the others), so that no thread
            # waits for one while holding the lock
            with self.slots, self._root_lock:
                if self._root is None:
                    self._root = self._open_root()
        return self._root

    def close(self):
        try:
            self.connector.close()
        except Exception:  # closing a dead socket must not fail anything
            LOG.debug("ignoring error while closing connection to %s", self.url)


def _fingerprint(password, verify):
    # The cache compares credentials without keeping a second copy of them.
    digest = hashlib.sha256((password or "").encode()).hexdigest()
    return f"{digest}:{verify}"


class ConnectionCache:
    """Thread-safe LRU cache of :class:`Connection` keyed by (url, username)."""

    def __init__(self, max_size=5000, ttl=900, max_requests=MAX_REQUESTS_PER_BMC):
        self.max_size = max_size
        self.ttl = ttl
        self.max_requests = max_requests  # per BMC whose first connection opens from now on
        # (url, username) -> RequestSlots: they outlive a connection, so that
        # requests still under way on a replaced one (TTL, new password, after
        # an error) count against the BMC's limit too
        self._slots = {}
        self._entries = collections.OrderedDict()
        self._lock = threading.Lock()
        self._creating = {}
        # url -> {name: value}: what was learnt of a BMC that its errors name
        # (vendor quirks, system path), kept when its connection is dropped
        # on a connection or authentication error (see remember)
        self._remembered = {}

    def __len__(self):
        with self._lock:
            return len(self._entries)

    def _fresh(self, key, fingerprint):
        """The live entry for ``key`` with these credentials, or None (holds _lock)."""
        conn = self._entries.get(key)
        if conn is not None and conn.fingerprint == fingerprint and (
                self.ttl and time.monotonic() - conn.created < self.ttl):
            self._entries.move_to_end(key)
            return conn
        return None

    def peek(self, url, username, password, verify=True):
        """The cached connection if there is a live one; never connects."""
        with self._lock:
            return self._fresh((url, username or ""), _fingerprint(password, verify))

    def get(self, url, username, password, verify=True, connect_timeout=None,
            read_timeout=60):
        key = (url, username or "")
        fingerprint = _fingerprint(password, verify)
        with self._lock:
            conn = self._fresh(key, fingerprint)
            if conn is not None:
                return conn
            create_lock = self._creating.setdefault(key, threading.Lock())
        with create_lock:
            with self._lock:  # another thread may have created it meanwhile
                conn = self._fresh(key, fingerprint)
                if conn is not None:
                    return conn
                slots = self._slots.get(key)
                if slots is None:
                    slots = self._slots[key] = RequestSlots(self.max_requests)
            new = self._connect(url, username, password, verify, connect_timeout,
                                read_timeout, fingerprint, slots)
            with self._lock:
                old = self._entries.pop(key, None)
                self._entries[key] = new
                evicted = []
                while len(self._entries) > self.max_size:
                    evicted.append(self._entries.popitem(last=False)[1])
                    self._remembered.pop(evicted[-1].url, None)
            for stale in ([old] if old else []) + evicted:
                stale.close()
            return new

    def remember(self, url, name, value):
        """Keep ``value`` for the BMC at ``url`` beyond its connection: an
        error after the connection was dropped still names the vendor and
        the system."""
        self._remembered.setdefault(url, {})[name] = value

    def recall(self, url, name):
        return self._remembered.get(url, {}).get(name)

    def invalidate(self, url, username):
        with self._lock:
            conn = self._entries.pop((url, username or ""), None)
        if conn:
            conn.close()

    def clear(self):
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._slots.clear()
            self._remembered.clear()
        for conn in entries:
            conn.close()

    @staticmethod
    def _connect(url, username, password, verify, connect_timeout, read_timeout,
                 fingerprint, slots):
        redact.register_secret(password)
        connector = SingleShotConnector(url, pool_size=slots.size, verify=verify,
                                        default_request_timeout=read_timeout,
                                        connect_timeout=connect_timeout)
        # BasicAuth: nothing to log in, no session to expire or leak on the BMC;
        # set on the connector now, as the sushy root would when opened.
        auth = sushy.auth.BasicAuth(username=username, password=password)
        connector.set_http_basic_auth(username, password)

        def open_root():
            return sushy.Sushy(url, auth=auth, connector=connector, root_prefix=ROOT_PREFIX,
                               verify=verify)
        LOG.debug("opened Redfish connection to %s as %s", url, username)
        return Connection(url, username, open_root, connector, fingerprint, slots)


#: The process-wide cache every client uses unless given another.
CACHE = ConnectionCache()
