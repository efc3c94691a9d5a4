"""How iPXE reads a script, written again from iPXE's C sources as a test oracle.

It shares no code with metalboot_framework.ipxe on purpose: the tests compare
what metalboot renders with what this model says iPXE would run.

- ``src/image/script.c`` (process_script): a line ends at ``\\n``; one ``\\r``
  before it is dropped; a line ending with ``\\`` continues on the next (a
  continued last line is never run); a line whose first non-space character is
  ``:`` starts with a label, up to the next space. The line is a C string: a
  NUL ends it.
- ``src/core/exec.c`` (system, split_command, command_terminator): words are
  split at isspace() (``src/core/ctype.c``: space, \\f, \\n, \\r, \\t, \\v), with
  no quoting; the words ``||``, ``&&`` and ``;`` end a command; a word beginning
  with ``#`` ends the line's commands (a comment).
- ``src/core/settings.c`` (expand_settings), per word after the split: the first
  ``}`` after a ``${`` closes the innermost ``${``, which is replaced by the
  setting's value (unknown or invalid names: nothing), and the word is scanned
  again from its start until no ``${...}`` is left.
"""

from typing import NamedTuple, Optional, Tuple

SPACE = " \f\n\r\t\v"
TERMINATORS = ("||", "&&", ";")


class Command(NamedTuple):
    line: int                  # number of the line (from 0) it is on
    label: Optional[str]       # the line's label, on its first command only
    words: Tuple[str, ...]     # as split, before expansion
    connector: Optional[str]   # "||", "&&", ";", or None: the end of the line


def lines(script):
    """The lines process_script hands to the shell, continuations joined."""
    out = []
    offset, line = 0, ""
    while True:
        eol = script.find("\n", offset)
        fragment = script[offset:] if eol < 0 else script[offset:eol]
        line += fragment
        offset += len(fragment) + 1
        if line.endswith("\r"):
            line = line[:-1]
        if line.endswith("\\"):
            line = line[:-1]
            if offset < len(script):
                continue
            break  # the do-while ends: a continued last line is dropped
        out.append(line.split("\0", 1)[0])
        line = ""
        if offset >= len(script):
            break
    return out


def _split(text):
    words, word = [], ""
    for char in text:
        if char in SPACE:
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    if word:
        words.append(word)
    return words


def commands(script):
    """Every command of ``script`` in order, as iPXE would see them."""
    found = []
    for number, line in enumerate(lines(script)):
        text = line.lstrip(SPACE)
        label = None
        if text.startswith(":"):
            end = next((i for i, c in enumerate(text) if c in SPACE), len(text))
            label, text = text[1:end], text[end + 1:]
        words = _split(text)
        while True:
            for i, word in enumerate(words):
                if word.startswith("#"):
                    found.append(Command(number, label, tuple(words[:i]), None))
                    words = None
                    break
                if word in TERMINATORS:
                    found.append(Command(number, label, tuple(words[:i]), word))
                    words = words[i + 1:]
                    break
            else:
                found.append(Command(number, label, tuple(words), None))
                words = None
            label = None
            if words is None:
                break
    return found


def expand(word, settings=None):
    """A word after iPXE's expansion of ``${name}`` (unknown names: empty)."""
    settings = settings or {}
    while True:
        start = end = None
        for i, char in enumerate(word):
            if word.startswith("${", i):
                start = i
            if start is not None and char == "}":
                end = i
                break
        if end is None:
            return word
        word = word[:start] + settings.get(word[start + 2:end], "") + word[end + 1:]
