"""Keep BMC passwords out of exception messages and log lines.

Every log line of the process is scrubbed (:func:`metalboot_framework.logs.redact`),
and a fleet may have one password per BMC: the registered passwords are found
with one Aho-Corasick pass over the text (pyahocorasick), not one search per
password, whose cost per line would grow with the fleet. Passwords registered since
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
# (automaton over the secrets registered when it was built, those registered
# since): one tuple, replaced in one assignment, read without the lock
_state = (None, ())


def _rebuild():
    """A new automaton over every secret (holds _lock)."""
    global _state
    automaton = None
    if _secrets:
        automaton = ahocorasick.Automaton()
        for secret in _secrets:
            automaton.add_word(secret, len(secret))
        automaton.make_automaton()
    _state = (automaton, ())


def _spans(text, extra):
    """(start, end) of every occurrence in ``text`` of a registered secret or of
    one of ``extra``."""
    automaton, recent = _state
    spans = [(end + 1 - length, end + 1) for end, length in automaton.iter(text)] \
        if automaton is not None else []
    for secret in (*recent, *extra):
        start = text.find(secret)
        while start >= 0:
            spans.append((start, start + len(secret)))
            start = text.find(secret, start + 1)
    return spans


def scrub(text, *secrets):
    """Return ``text`` with every given secret (and every registered one) masked.

    Overlapping occurrences are masked as one: masking one secret after the
    other would leave the part of the second that the first's mask covered."""
    if text is None:
        return text
    text = str(text)
    spans = _spans(text, [s for s in secrets if s and len(s) >= MIN_LENGTH])
    if not spans:
        return text
    merged = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, last = [], 0
    for start, end in merged:
        out += [text[last:start], MASK]
        last = end
    out.append(text[last:])
    return "".join(out)


def register_secret(secret):
    """Remember a password so that :class:`RedactingFilter` masks it in logs."""
    global _state
    if not secret or len(secret) < MIN_LENGTH:
        return
    with _lock:
        if secret in _secrets:
            return
        _secrets.add(secret)
        automaton, recent = _state
        if len(recent) >= REBUILD_AFTER:
            _rebuild()
        else:
            _state = (automaton, recent + (secret,))


def forget_secret(secret):
    global _state
    with _lock:
        if secret not in _secrets:
            return
        _secrets.discard(secret)
        automaton, recent = _state
        if secret in recent:
            _state = (automaton, tuple(s for s in recent if s != secret))
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
