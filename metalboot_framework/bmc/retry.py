"""Retries with backoff (tenacity) and translation of sushy errors.

Retried: connection errors (refused, reset, timed out) and 5xx answers.
Never retried: 4xx answers (wrong credentials, bad request, not found) -- except
that with the HPE quirk a 400 saying "the system is in POST" is retried for up to
``[bmc] post_retry_timeout`` seconds.
"""

import logging

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


def is_post_refusal(exc):
    return isinstance(exc, sushy_exc.BadRequestError) and quirks_mod.is_post_refusal(
        f"{exc.code} {exc.detail} {exc.extended_info} {exc}")


class Policy:
    """How often and how long to retry, from the [bmc] options."""

    def __init__(self, attempts=5, interval=4.0, max_interval=30.0,
                 post_timeout=300.0, post_interval=10.0):
        self.attempts = attempts
        self.interval = interval
        self.max_interval = max_interval
        self.post_timeout = post_timeout
        self.post_interval = post_interval

    @classmethod
    def from_conf(cls, conf):
        b = conf.bmc
        return cls(b.retry_attempts, b.retry_interval, b.retry_max_interval,
                   b.post_retry_timeout, b.post_retry_interval)

    def run(self, fn, *, describe, retry_during_post=False, on_transient=None):
        """Call ``fn()``, retrying per this policy; ``describe()`` names the call."""
        exponential = tenacity.wait_exponential(multiplier=self.interval,
                                                max=self.max_interval)

        def should_retry(exc):
            return is_transient(exc) or (retry_during_post and is_post_refusal(exc))

        def stop(state):
            exc = state.outcome.exception()
            if retry_during_post and is_post_refusal(exc):
                return state.seconds_since_start + self.post_interval > self.post_timeout
            return state.attempt_number >= self.attempts

        def wait(state):
            exc = state.outcome.exception()
            if retry_during_post and is_post_refusal(exc):
                return self.post_interval
            return exponential(state)

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
        return retrying(fn)


def _short(exc):
    if isinstance(exc, sushy_exc.HTTPError):
        return f"HTTP {exc.status_code} {exc.code}: {exc.detail or 'no detail'}"
    return f"{type(exc).__name__}: {exc}"


def translate(exc, *, address, system, operation, username=None, password=None,
              attempts=None):
    """A :class:`BmcError` for ``exc`` naming the BMC, the system and the operation."""
    if isinstance(exc, MetalbootError):
        return exc
    where = f"BMC {address}, system {system or '(default)'}: {operation}"
    tries = f" after {attempts} attempt(s)" if attempts and attempts > 1 else ""
    kwargs = dict(address=address, system=system, operation=operation)
    if isinstance(exc, sushy_exc.AccessError):
        cls, detail = BmcAuthError, (
            f"the BMC refused the credentials of user {username!r} "
            f"(HTTP {exc.status_code}); check bmc.username and bmc.password")
    elif isinstance(exc, sushy_exc.ConnectionError):
        cls, detail = BmcConnectionError, f"cannot reach the BMC{tries}: {exc}"
    elif isinstance(exc, sushy_exc.ServerSideError):
        cls, detail = BmcError, f"the BMC answered HTTP {exc.status_code}{tries}: " \
                                f"{exc.code}: {exc.detail or 'no detail'}"
    elif isinstance(exc, sushy_exc.ResourceNotFoundError):
        cls, detail = BmcUnsupported, f"resource not found (HTTP 404): {exc}"
    elif isinstance(exc, sushy_exc.HTTPError):
        cls, detail = BmcError, f"the BMC refused the request (HTTP {exc.status_code}): " \
                                f"{exc.code}: {exc.detail or 'no detail'}"
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
    message = redact.scrub(f"{where} failed: {detail}", password)
    status = getattr(exc, "status_code", None)
    return cls(message, status_code=status, **kwargs)
