"""Retries with backoff (tenacity) and translation of sushy errors.

Retried: connection errors (refused, reset, timed out) and 5xx answers.
Never retried: 4xx answers (wrong credentials, bad request, not found) -- except
a BMC's "busy, not ready, in POST" refusal of any vendor in
:data:`~metalboot_framework.bmc.quirks.BUSY_REFUSALS`, retried every
``[bmc] post_retry_interval`` seconds for up to ``[bmc] post_retry_timeout``.
A call gives up before ``[bmc] call_timeout`` seconds have passed since it
began: no attempt starts that could end later.

A request that is not idempotent (a reset, a media insert) is sent again only
when it surely never reached the BMC (connection refused, connect timeout) or
the BMC answered that it failed (5xx, busy). After a read timeout or a
connection dropped after sending, the BMC may have done it:
:class:`OutcomeUnknown` tells the caller to read the BMC's state and decide.
"""

import logging
import time

import requests
import sushy
import tenacity

from metalboot_framework.bmc import quirks as quirks_mod
from metalboot_framework.bmc import redact
from metalboot_framework.exceptions import (BmcAuthError, BmcConnectionError, BmcError,
                                            BmcUnsupported, MetalbootError)

LOG = logging.getLogger(__name__)

sushy_exc = sushy.exceptions


def is_transient(exc):
    return isinstance(exc, (sushy_exc.ConnectionError, sushy_exc.ServerSideError))


def is_busy_refusal(exc):
    """A 4xx with which a BMC says "not now" (see quirks.BUSY_REFUSALS)."""
    return isinstance(exc, sushy_exc.HTTPError) and exc.status_code in (400, 409) and \
        quirks_mod.is_busy_refusal(f"{exc.code} {exc.detail} {exc.extended_info} {exc}")



def never_reached_bmc(exc):
    """Whether a failed request surely never reached the BMC."""
    if not isinstance(exc, sushy_exc.ConnectionError):
        return False
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, requests.exceptions.ConnectTimeout):
        return True
    text = repr(cause)
    return isinstance(cause, requests.exceptions.ConnectionError) and (
        "NewConnectionError" in text or "Connection refused" in text)


def timed_out(exc):
    """"read" where the BMC accepted the connection and sent no answer in
    time, "connect" where it did not even accept it, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return "connect"
        if isinstance(exc, requests.exceptions.ReadTimeout):
            return "read"
        exc = exc.__cause__ or exc.__context__
    return None


def refused_by_bmc(exc):
    """A 5xx: the BMC answered, saying that the request failed."""
    return isinstance(exc, sushy_exc.ServerSideError)


class OutcomeUnknown(Exception):
    """A request that is not idempotent may or may not have been done."""

    def __init__(self, cause):
        super().__init__(f"no answer that says whether the BMC did it: {_short(cause)}")
        self.cause = cause


class Policy:
    """How often and how long to retry, from the [bmc] options."""

    def __init__(self, attempts=5, interval=4.0, max_interval=30.0,
                 post_timeout=300.0, post_interval=10.0, call_timeout=None,
                 attempt_timeout=0.0):
        self.attempts = attempts
        self.interval = interval
        self.max_interval = max_interval
        self.post_timeout = post_timeout
        self.post_interval = post_interval
        self.call_timeout = call_timeout
        #: How long one attempt may take (the longer of the connect and read
        #: timeouts): no attempt starts that could end after call_timeout.
        self.attempt_timeout = attempt_timeout

    @classmethod
    def from_conf(cls, conf):
        b = conf.bmc
        return cls(b.retry_attempts, b.retry_interval, b.retry_max_interval,
                   b.post_retry_timeout, b.post_retry_interval, b.call_timeout,
                   max(b.connect_timeout, b.read_timeout))

    def run(self, fn, *, describe, on_transient=None, idempotent=True):
        """Call ``fn()``, retrying per this policy; ``describe()`` names the call.

        ``idempotent=False``: retried only when the request never reached the
        BMC or was refused by it; raises :class:`OutcomeUnknown` when it may
        have been done.
        """
        exponential = tenacity.wait_exponential(multiplier=self.interval,
                                                max=self.max_interval)
        started = time.monotonic()

        def should_retry(exc):
            if is_busy_refusal(exc):
                return True
            if not idempotent:
                return never_reached_bmc(exc) or refused_by_bmc(exc)
            return is_transient(exc)

        def stop(state):
            exc = state.outcome.exception()
            spent = time.monotonic() - started
            if is_busy_refusal(exc):
                return spent + self.post_interval > self.post_timeout
            if self.call_timeout is not None and \
                    spent + wait(state) + self.attempt_timeout > self.call_timeout:
                return True
            return state.attempt_number >= self.attempts

        def wait(state):
            exc = state.outcome.exception()
            if is_busy_refusal(exc):
                return self.post_interval
            return exponential(state)

        def attempt():
            try:
                return fn()
            except (sushy_exc.ConnectionError, sushy_exc.ServerSideError) as exc:
                if idempotent or never_reached_bmc(exc) or refused_by_bmc(exc):
                    raise
                raise OutcomeUnknown(exc) from exc

        def before_sleep(state):
            exc = state.outcome.exception()
            if on_transient and is_transient(exc):
                on_transient(exc)
            LOG.warning("%s: attempt %d failed (%s), retrying in %.1f s", describe(),
                        state.attempt_number, redact.scrub(_short(exc)),
                        state.next_action.sleep if state.next_action else 0)

        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(should_retry),
                                     stop=stop, wait=wait, before_sleep=before_sleep,
                                     reraise=True)
        return retrying(attempt)


def message_ids(exc):
    """The Redfish MessageIds of an error answer, or its error code."""
    ids = [info.get("MessageId") for info in (getattr(exc, "extended_info", None) or [])
           if isinstance(info, dict) and info.get("MessageId")]
    code = getattr(exc, "code", None)
    return ids or ([code] if code else [])


def request_of(exc):
    """``"METHOD /uri/path"`` of the request that failed with ``exc`` (set by
    :class:`~metalboot_framework.bmc.connection.SingleShotConnector`), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        request = getattr(exc, "request", None)
        if request:
            return request
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


def _short(exc):
    request = request_of(exc)
    at = f"{request}: " if request else ""
    if isinstance(exc, sushy_exc.HTTPError):
        ids = message_ids(exc)
        return f"{at}HTTP {exc.status_code} {', '.join(ids) or exc.code}: " \
               f"{exc.detail or 'no detail'}"
    return f"{at}{type(exc).__name__}: {exc}"


def translate(exc, *, address, system, operation, username=None, password=None,
              attempts=None, vendor=None, timeouts=(None, None)):
    """A :class:`BmcError` for ``exc`` naming the BMC (and its vendor, when
    known), the system, the operation, the request that failed (method and
    URI path) and the Redfish MessageId. ``timeouts``: the (connect, read)
    timeouts in seconds the requests were sent with, for a time-out's message."""
    if isinstance(exc, MetalbootError):
        return exc
    request = request_of(exc)
    where = f"BMC {address}{f' ({vendor})' if vendor else ''}, system " \
            f"{system or '(default)'}: {operation}"
    tries = f" after {attempts} attempt(s)" if attempts and attempts > 1 else ""
    kwargs = dict(address=address, system=system, operation=operation)
    if isinstance(exc, sushy_exc.AccessError):
        ids = message_ids(exc) if exc.body is not None else []
        cls, detail = BmcAuthError, (
            f"the BMC refused the credentials of user {username!r} "
            f"(HTTP {exc.status_code}){f' with {ids[0]}' if ids else ''}; "
            f"check bmc.username and bmc.password")
    elif isinstance(exc, sushy_exc.ConnectionError) and timed_out(exc):
        kind = timed_out(exc)
        seconds = timeouts[0 if kind == "connect" else 1]
        each = f", each of {attempts} attempts" if attempts and attempts > 1 else ""
        cls, detail = BmcConnectionError, (
            "the BMC accepted the connection but sent no answer: "
            if kind == "read" else "the BMC did not accept the connection: ") + (
            f"timed out after {seconds:g} seconds{each}" if seconds is not None
            else f"timed out{tries}") + (
            " ([bmc] read_timeout)" if kind == "read" else " ([bmc] connect_timeout)")
    elif isinstance(exc, sushy_exc.ConnectionError):
        cls, detail = BmcConnectionError, f"cannot reach the BMC{tries}: {exc}"
    elif isinstance(exc, OutcomeUnknown):
        cls, detail = BmcError, str(exc)
    elif isinstance(exc, sushy_exc.ServerSideError):
        cls, detail = BmcError, f"the BMC answered HTTP {exc.status_code}{tries}: " \
                                f"{', '.join(message_ids(exc))}: {exc.detail or 'no detail'}"
    elif isinstance(exc, sushy_exc.ResourceNotFoundError):
        ids = message_ids(exc) if exc.body is not None else []
        cls, detail = BmcUnsupported, f"resource not found (HTTP 404)" \
                                      f"{f' with {ids[0]}' if ids else ''}: {exc}"
    elif isinstance(exc, sushy_exc.HTTPError):
        cls, detail = BmcError, f"the BMC refused the request (HTTP {exc.status_code}): " \
                                f"{', '.join(message_ids(exc))}: {exc.detail or 'no detail'}"
    elif isinstance(exc, (sushy_exc.InvalidParameterValueError, sushy_exc.MissingActionError,
                          sushy_exc.MissingAttributeError)):
        cls, detail = BmcUnsupported, str(exc)
    elif isinstance(exc, sushy_exc.UnknownDefaultError):
        cls, detail = BmcError, (f"{exc}; set the machine property redfish_system_id "
                                 f"to the system's Id or @odata.id")
    elif isinstance(exc, sushy_exc.SushyError):
        cls, detail = BmcError, str(exc)
    else:
        cls, detail = BmcError, f"{type(exc).__name__}: {exc}"
    message = redact.scrub(f"{where} failed{f' at {request}' if request else ''}: {detail}",
                           password)
    status = getattr(exc, "status_code", None)
    return cls(message, status_code=status, **kwargs)
