"""What a value may be where it reaches an iPXE script, and how it is written there.

iPXE reads a script as follows (``src/image/script.c``, ``src/core/exec.c``,
``src/core/settings.c``): a line ends at a newline (a carriage return before it
is dropped); a line ending with ``\\`` continues on the next one; a line whose
first word begins with ``:`` is a label. A line is split into words at
:data:`WHITESPACE`, with no quoting or escaping of any kind; the words ``||``,
``&&`` and ``;`` end a command and start the next, and a word beginning with
``#`` makes the rest of the line a comment. Only then is each word expanded:
``${name}`` becomes the value of a setting (an unknown or invalid name, ``${}``
among them, becomes nothing), so an expansion can never add a command.

Hence two defences, both here:

- a grammar per field (:data:`NAME`, :data:`VERSION`, :data:`URL`,
  :data:`KERNEL_ARGUMENTS`): the API checks every value that reaches a boot
  script or a kernel command line against one of them (``api/schemas.py``
  applies them; ``doc/api.rst`` lists which field has which);
- :func:`quote`, which every template environment that renders an iPXE script
  applies to every value it writes (jinja2's ``finalize``): what no grammar can
  forbid (free-form properties in an operator's template, values stored before a
  grammar was tightened) still never adds, ends or comments out a command.
"""

import re
from typing import NamedTuple

import jinja2

#: What iPXE's ``isspace()`` calls white space (``src/core/ctype.c``).
WHITESPACE = " \t\n\v\f\r"
#: Words that end one command and start the next (``command_terminator``).
TERMINATORS = ("||", "&&", ";")
#: An empty expansion: written before a word, it keeps iPXE from reading the
#: word as a terminator, a comment or a label, and expands to nothing.
EMPTY = "${}"

_SPACES = re.compile(f"[{re.escape(WHITESPACE)}]+")
# Control characters that are not white space: a NUL would end iPXE's line
# early; the others have no business in a script.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
# Characters of values that quote() writes as they are, if no word begins
# with '#' or ':' (rendering boot.ipxe is on the path of every boot: most
# values are checked by this one scan).
_PLAIN = re.compile(r"[^\x00-\x1f\x7f\\;|&]+")


class Grammar(NamedTuple):
    """A pattern that a whole value must match, and what to tell who breaks it."""

    #: Anchored by ^ and $ and written in the subset of regular expressions
    #: that Python and ECMA-262 (the OpenAPI document's dialect) read alike.
    pattern: str
    error: str

    def accepts(self, value):
        """Whether all of ``value`` matches (``re.fullmatch``: Python's ``$``
        would also match before a final newline)."""
        return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None


#: Partition ids (boot.ipxe's comments and echo lines, autoexec.ipxe, URLs).
NAME = Grammar(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
               "Must be 1-128 letters, digits, '.', '_' or '-', starting with a letter "
               "or digit.")

#: boot.metal_hammer_version (METAL_HAMMER_VERSION= on the kernel line).
VERSION = Grammar(r"^[A-Za-z0-9._+-]{1,128}$",
                  "Must be 1-128 letters, digits, '.', '_', '+' or '-'.")

#: The characters of an http(s) URL (RFC 3986: unreserved, reserved and '%'):
#: no white space, no '\\', '{', '}', '|' or non-ASCII (percent-encode those).
URL = Grammar(r"^[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,2048}$",
              "Must be at most 2048 characters allowed in a URL (RFC 3986): letters, "
              "digits and -._~:/?#[]@!$&'()*+,;=%; percent-encode any other.")

# One word of a kernel command line: printable ASCII, not a word that ends
# iPXE's command (||, && or ;) and not beginning with # (a comment).
_KERNEL_WORD = r"(?!#|(?:\|\||&&|;)(?: |$))[!-~]+"

#: boot.cmdline: words separated by spaces. ${...} is allowed and left to iPXE
#: to expand: it cannot add a command (see above).
KERNEL_ARGUMENTS = Grammar(
    rf"^ *(?:{_KERNEL_WORD}(?: +{_KERNEL_WORD})*)? *$",
    "Must be one line of printable ASCII words separated by spaces, none of them "
    "||, && or ; and none beginning with #: iPXE would end the kernel command there.")


def quote(value):
    """``value`` as text that iPXE reads as the same words of the same command.

    Runs of white space (line breaks among them) become one space, other control
    characters are dropped, a word that iPXE would read as ``||``, ``&&``,
    ``;``, a comment or a label gets :data:`EMPTY` before it, and a final
    ``\\`` (which would join the next line to this one) one after it.
    """
    text = value if isinstance(value, str) else str(value)
    if (_PLAIN.fullmatch(text) and text[0] not in "#:" and " #" not in text
            and " :" not in text):
        return text
    text = _CONTROL.sub("", text)
    text = " ".join(EMPTY + word if word in TERMINATORS or word[:1] in ("#", ":") else word
                    for word in _SPACES.split(text))
    if text.endswith("\\"):
        text += EMPTY
    return text


def script_environment(loader):
    """A jinja2 environment for iPXE script templates: every ``{{ value }}`` is
    written through :func:`quote`, in built-in and operators' templates alike."""
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True, finalize=quote)
