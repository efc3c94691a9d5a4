"""Keep BMC passwords out of exception messages and log lines."""

import logging
import threading

MASK = "***"

_secrets = set()
_lock = threading.Lock()


def scrub(text, *secrets):
    """Return ``text`` with every given secret (and every registered one) masked."""
    if text is None:
        return text
    text = str(text)
    with _lock:
        known = set(_secrets)
    for secret in set(secrets) | known:
        if secret and len(secret) >= 3:
            text = text.replace(secret, MASK)
    return text


def register_secret(secret):
    """Remember a password so that :class:`RedactingFilter` masks it in logs."""
    if secret:
        with _lock:
            _secrets.add(secret)


def forget_secret(secret):
    with _lock:
        _secrets.discard(secret)


class RedactingFilter(logging.Filter):
    """Masks registered passwords in records of the loggers it is attached to.

    Installed on the ``sushy`` and ``metalboot_framework.bmc`` loggers so that
    even a BMC echoing a password back in an error body is not logged.
    """

    def filter(self, record):
        with _lock:
            if not _secrets:
                return True
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's business
            return True
        cleaned = scrub(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = ()
        return True


_filter = RedactingFilter()


def install_log_filter(*prefixes):
    """Attach the filter to every existing logger named by or below ``prefixes``.

    Logger filters do not apply to records of child loggers, so each module
    logger (``sushy.connector``, ``sushy.main``...) gets its own.
    """
    names = [name for name in list(logging.Logger.manager.loggerDict)
             if any(name == p or name.startswith(p + ".") for p in prefixes)]
    for name in set(names) | set(prefixes):
        logger = logging.getLogger(name)
        if _filter not in logger.filters:
            logger.addFilter(_filter)
