"""Keep BMC passwords out of exception messages and log lines.

Every log line of the process is scrubbed (:func:`metalboot_framework.logs.redact`),
and a fleet may have one password per BMC: the registered passwords are found
with one Aho-Corasick pass over the text (pyahocorasick), not one search per
password (10,000 searches cost about 3 ms a line). Passwords registered since
the automaton was built are searched one by one until there are
:data:`REBUILD_AFTER` of them; then the automaton is built again.
"""

import logging
import threading

import ahocorasick

MASK = "***"
MIN_LENGTH = 3  # shorter strings would mask half of every message
REBUILD_AFTER = 64

_secrets = set()
_lock = threading.Lock()
_automaton = None  # over the secrets registered when it was built
_recent = ()  # registered since


def _rebuild():
    """A new automaton over every secret (holds _lock)."""
    global _automaton, _recent
    automaton = None
    if _secrets:
        automaton = ahocorasick.Automaton()
        for secret in _secrets:
            automaton.add_word(secret, secret)
        automaton.make_automaton()
    _automaton, _recent = automaton, ()


def _found(text):
    """The registered secrets that occur in ``text``."""
    automaton, recent = _automaton, _recent  # read once: a rebuild swaps both
    found = {secret for _, secret in automaton.iter(text)} if automaton is not None else set()
    found.update(secret for secret in recent if secret in text)
    return found


def scrub(text, *secrets):
    """Return ``text`` with every given secret (and every registered one) masked."""
    if text is None:
        return text
    text = str(text)
    found = _found(text)
    found.update(s for s in secrets if s and len(s) >= MIN_LENGTH and s in text)
    # longest first: a password containing another one is masked whole
    for secret in sorted(found, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def register_secret(secret):
    """Remember a password so that :class:`RedactingFilter` masks it in logs."""
    global _recent
    if not secret or len(secret) < MIN_LENGTH:
        return
    with _lock:
        if secret in _secrets:
            return
        _secrets.add(secret)
        if len(_recent) >= REBUILD_AFTER:
            _rebuild()
        else:
            _recent = _recent + (secret,)


def forget_secret(secret):
    global _recent
    with _lock:
        if secret not in _secrets:
            return
        _secrets.discard(secret)
        if secret in _recent:
            _recent = tuple(s for s in _recent if s != secret)
        else:
            _rebuild()


class RedactingFilter(logging.Filter):
    """Masks registered passwords in records of the loggers it is attached to.

    Installed on the ``sushy`` and ``metalboot_framework.bmc`` loggers so that
    even a BMC echoing a password back in an error body is not logged.
    """

    def filter(self, record):
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
