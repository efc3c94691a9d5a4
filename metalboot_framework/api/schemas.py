"""Marshmallow schemas: the one source of request validation and of the OpenAPI document.

Request schemas reject unknown fields; response schemas describe what the API
returns (the handlers build plain dicts of that shape; tests check them against
the served OpenAPI document).
"""

import collections
import datetime
import ipaddress
import json
import re
import urllib.parse
import uuid

from flask import current_app, has_app_context
from marshmallow import RAISE, Schema, ValidationError, fields, validate, validates_schema

from metalboot_framework import ipxe, machine_lifecycle, machine_steps, migration_states
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.conf.api import DEFAULT_MAX_PROPERTIES_SIZE

MAC_RE = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$", re.I)
DUID_RE = re.compile(r"^[0-9a-f]{2}(:?[0-9a-f]{2})+$", re.I)

BOOT_MODES = ("uefi", "bios")
SETTABLE_STATES = machine_lifecycle.SETTABLE
MACHINE_STATES = machine_lifecycle.ALL
MAX_PAGE_SIZE = 1000
MAX_CURSOR = 2 ** 63 - 1  # a database BIGINT


# Characters that text shown to operators (CLI, dashboard, logs) may not hold:
# C0 and C1 controls (BEL, CR, LF, TAB, DEL, ...), Unicode's bidirectional
# overrides, embeddings, isolates and marks, zero-width characters and line
# separators, which reorder or hide what a reader sees. A JSON Schema pattern
# (ECMA-262 and Python read it alike).
UNCLEAN = ("\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u180e\\u200b-\\u200f\\u2028-\\u202e"
           "\\u2060-\\u2064\\u2066-\\u206f\\ufeff")
CLEAN_TEXT = f"^[^{UNCLEAN}]*(?![\\s\\S])"  # the end of the text (see exact_end)
_UNCLEAN_CHAR = re.compile(f"[{UNCLEAN}]")


def clean_text(value):
    """Refuse text with a character of :data:`UNCLEAN`, naming it."""
    found = _UNCLEAN_CHAR.search(value)
    if found:
        raise ValidationError(f"U+{ord(found.group()):04X} is not allowed: no control, "
                              "bidirectional or zero-width characters.")
    return value


def escape_unclean(text):
    """``text`` with each character of :data:`UNCLEAN` as a \\uXXXX escape."""
    return _UNCLEAN_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# The metadata of a request's string that may hold any text (a password, a
# machine's message): clean_text does not apply to it.
ANY_TEXT = {"any_text": True}


class StrictSchema(Schema):
    """A request: unknown fields refused, and every string (a dict's keys and
    a list's items too) clean text (:func:`clean_text`) unless its field's
    metadata says ``any_text``."""

    class Meta:
        unknown = RAISE

    def on_bind_field(self, field_name, field_obj):
        _clean_strings(field_obj)


def _clean_strings(field):
    if isinstance(field, fields.String) and not field.metadata.get("any_text"):
        field.validators.append(clean_text)
    elif isinstance(field, fields.Dict) and field.key_field is not None:
        _clean_strings(field.key_field)
    elif isinstance(field, fields.List):
        _clean_strings(field.inner)


# Answers: the handlers build plain dicts; these schemas describe them for the
# OpenAPI document. A field the answer always carries is required=True (null
# where allow_none), so that a generated client may rely on it.
ALWAYS = {"required": True}


class Timestamp(fields.String):
    """A UTC time as the API writes it: RFC 3339, milliseconds, ``Z``
    (``format: date-time`` in the document)."""


# A cursor or a row id: beyond 32 bits in a long-lived database.
INT64 = {"format": "int64"}


class JsonInteger(fields.Integer):
    """An integer in a JSON body: 5, not "5" or 5.5 (query strings use
    fields.Integer, which parses their text)."""

    def __init__(self, **kwargs):
        super().__init__(strict=True, **kwargs)

    def _validated(self, value):
        if isinstance(value, bool):  # a bool is an int to Python, not to JSON
            raise self.make_error("invalid")
        return super()._validated(value)


class JsonBoolean(fields.Boolean):
    """true or false in a JSON body, not "yes" or 1."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


def _one_word(text):
    """Whether ``text`` holds no white space or other unprintable character."""
    return all(c.isprintable() and not c.isspace() for c in text)


class FullMatch(validate.Regexp):
    """:class:`validate.Regexp` over the whole value. ``Regexp`` uses
    ``re.match``, whose ``$`` also matches before a final newline: "p1\\n" would
    pass ``^...$``. Every ``$`` of the pattern is written ``(?![\\s\\S])`` (the
    end of the text in Python and in JSON Schema's ECMA-262 alike), so that the
    pattern the OpenAPI document shows, which generated clients and
    schemathesis use, allows exactly what the server accepts."""

    def __init__(self, pattern, *args, **kwargs):
        super().__init__(exact_end(pattern), *args, **kwargs)

    def __call__(self, value):
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value


def exact_end(pattern):
    """``pattern`` with each unescaped ``$`` outside a character class written
    as ``(?![\\s\\S])``."""
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append(r"(?![\s\S])")
            continue
        out.append(char)
    return "".join(out)


def grammar(rule):
    """The validator of an :class:`ipxe.Grammar`: the one rule of a field whose
    value reaches a boot script or a kernel command line."""
    return FullMatch(rule.pattern, error=rule.error)


# Patterns of what the address fields below accept, for the document (a
# client that follows it is not refused for a rule it could not read); each
# allows nothing the field refuses (tests/unit/test_openapi.py checks).
_HEX4 = "[0-9A-Fa-f]{1,4}"
IPV6 = "(?:" + "|".join((
    f"(?:{_HEX4}:){{7}}{_HEX4}", f"(?:{_HEX4}:){{1,7}}:",
    *(f"(?:{_HEX4}:){{1,{7 - n}}}(?::{_HEX4}){{1,{n}}}" for n in range(1, 7)),
    f":(?:(?::{_HEX4}){{1,7}}|:)")) + ")"
_PORT = "(?:[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_HOST = f"(?:[A-Za-z0-9._~!$&'()*+,;=%-]+|\\[{IPV6}\\])(?::{_PORT})?"
_SCHEME = "[Hh][Tt][Tt][Pp][Ss]?://"
_END = "(?![\\s\\S])"  # the end of the text (see exact_end)
#: An http(s) URL: a host, a port in range, of :data:`ipxe.URL`'s characters.
HTTP_URL = (f"^{_SCHEME}(?:[A-Za-z0-9._~!$&'()*+,;=%:-]*@)?{_HOST}"
            f"(?:[/?#][A-Za-z0-9._~:/?#\\[\\]@!$&'()*+,;=%-]*)?{_END}")
#: A BMC's address: host, host:port, [v6]:port, or an http(s) URL of one.
BMC_ADDRESS = f"^(?:{_SCHEME})?{_HOST}/?{_END}"
#: A unicast MAC other than the all-zero one, one separator throughout.
MAC = (f"^(?!00([:-])00(?:\\1[0][0]){{4}}{_END})"
       f"[0-9A-Fa-f][02468AaCcEe]([:-])[0-9A-Fa-f]{{2}}(?:\\2[0-9A-Fa-f]{{2}}){{4}}{_END}")
#: A DUID: 3 to 130 hex octets, all or none separated by ':'.
DUID = (f"^(?:[0-9A-Fa-f]{{2}}(?::[0-9A-Fa-f]{{2}}){{2,129}}|(?:[0-9A-Fa-f]{{2}}){{3,130}})"
        f"{_END}")


def _documented(kwargs, **rules):
    """``kwargs`` of a field whose metadata carries ``rules`` (its own win)."""
    return {**kwargs, "metadata": {**rules, **kwargs.get("metadata", {})}}


class MacAddress(fields.String):
    """A unicast MAC, given with ':' or '-'; stored lowercase with ':'."""

    default_error_messages = {
        "invalid_mac": "Not a valid MAC address (expected aa:bb:cc:dd:ee:ff)."}

    def __init__(self, **kwargs):
        super().__init__(**_documented(kwargs, pattern=MAC))

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        if not MAC_RE.fullmatch(value):
            raise self.make_error("invalid_mac")
        mac = value.lower().replace("-", ":")
        first = int(mac[:2], 16)
        if first & 1:
            raise ValidationError("Not a unicast MAC address (multicast bit set).")
        if mac == "00:00:00:00:00:00":
            raise ValidationError("The all-zero MAC address is not a NIC's address.")
        return mac


class Duid(fields.String):
    """A DHCPv6 DUID in hex, with or without ':'; stored lowercase with ':'."""

    def __init__(self, **kwargs):
        super().__init__(**_documented(kwargs, pattern=DUID))

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        if not DUID_RE.fullmatch(value) or (":" in value and not re.fullmatch(
                r"[0-9a-f]{2}(:[0-9a-f]{2})+", value, re.I)):
            raise ValidationError("Not a valid DUID (hex octets, e.g. 00:01:00:01:...).")
        raw = value.replace(":", "").lower()
        octets = [raw[i:i + 2] for i in range(0, len(raw), 2)]
        if not 3 <= len(octets) <= 130:
            raise ValidationError("A DUID has 3 to 130 octets.")
        return ":".join(octets)


class HttpUrl(fields.String):
    """An absolute http(s) URL, of the characters :data:`ipxe.URL` allows (it
    goes into iPXE scripts as one word)."""

    def __init__(self, **kwargs):
        super().__init__(**_documented(kwargs, pattern=HTTP_URL, minLength=1, maxLength=2048))

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        if not ipxe.URL.accepts(value):
            raise ValidationError(ipxe.URL.error)
        try:
            parsed = urllib.parse.urlsplit(value)
            parsed.port  # noqa: B018  (raises on a bad port)
        except ValueError as exc:
            raise ValidationError(f"Not a valid URL: {exc}.")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValidationError("Not a valid http(s) URL.")
        return value


class BmcAddress(fields.String):
    """A BMC: host, host:port, [v6]:port, or http(s)://host[:port]; stored as a URL."""

    def __init__(self, **kwargs):
        super().__init__(**_documented(kwargs, pattern=BMC_ADDRESS, minLength=1))

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        if not value:
            raise ValidationError("Must not be empty.")
        url = value if "://" in value else f"https://{value}"
        try:
            parsed = urllib.parse.urlsplit(url)
            parsed.port  # noqa: B018
        except ValueError as exc:
            raise ValidationError(f"Not a valid BMC address: {exc}.")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValidationError("Not a valid BMC address (host, host:port or http(s) URL).")
        if not _one_word(url):
            raise ValidationError("A BMC address contains no white space.")
        if parsed.username is not None or parsed.password is not None:
            # it is shown in every answer about the machine; the password is not
            raise ValidationError("Give the BMC's credentials in username and password, "
                                  "not in its address.")
        return url.rstrip("/")


class Ipv4(fields.String):
    def __init__(self, **kwargs):
        super().__init__(**_documented(kwargs, format="ipv4"))

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        try:
            return str(ipaddress.IPv4Address(value))
        except ValueError:
            raise ValidationError("Not a valid IPv4 address.")


class Ipv6(fields.String):
    def __init__(self, **kwargs):
        super().__init__(**_documented(kwargs, format="ipv6"))

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        try:
            return str(ipaddress.IPv6Address(value))
        except ValueError:
            raise ValidationError("Not a valid IPv6 address.")


def canonical_machine_id(value):
    """A machine id as stored: a UUID in lower case (``value`` unchanged if it
    is no UUID: it then names no machine)."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return value


class MachineId(fields.String):
    """metal-api's machine UUID; stored in canonical lowercase form."""

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        try:
            return str(uuid.UUID(value))
        except ValueError:
            raise ValidationError("Not a valid UUID.")


def _max_properties_size():
    if has_app_context() and "metalboot" in current_app.extensions:
        return current_app.extensions["metalboot"].conf.api.max_properties_size
    return DEFAULT_MAX_PROPERTIES_SIZE


class Properties(fields.Dict):
    """A free-form object of at most ``[api] max_properties_size`` bytes as
    compact UTF-8 JSON: it is stored, and served back with every list."""

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        limit = _max_properties_size()
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)
                   .encode("utf-8", "surrogatepass"))
        if size > limit:
            raise ValidationError(f"At most {limit} bytes as compact JSON "
                                  f"([api] max_properties_size); this is {size}.")
        return value


# -- partitions ---------------------------------------------------------------

class BootConfigSchema(StrictSchema):
    kernel_url = HttpUrl(allow_none=True, metadata={"description": "Kernel (metal-hammer) URL."})
    initrd_url = HttpUrl(allow_none=True, metadata={"description": "Initrd URL."})
    cmdline = fields.String(validate=[validate.Length(max=4096),
                                      grammar(ipxe.KERNEL_ARGUMENTS)],
                            metadata={"description": "Kernel command line: one line, without "
                                                     "the words ||, && and ; or a word "
                                                     "beginning with #, which would end "
                                                     "iPXE's kernel command."})
    metal_boot_url = HttpUrl(allow_none=True,
                             metadata={"description": "Base URL of metal-boot in the partition."})
    metal_hammer_version = fields.String(allow_none=True, validate=grammar(ipxe.VERSION))
    boot_url = HttpUrl(allow_none=True, metadata={
        "description": "Where the partition's machines fetch what they boot and post their "
                       "boot reports: the (anycast) URL of its metalboot-boot-agents. "
                       "Null: the API's [api] public_url."})


class PartitionCreateSchema(StrictSchema):
    id = fields.String(required=True, validate=grammar(ipxe.NAME))
    description = fields.String(validate=validate.Length(max=4096))
    boot = fields.Nested(BootConfigSchema)
    properties = Properties(keys=fields.String())


class PartitionPatchSchema(StrictSchema):
    description = fields.String(validate=validate.Length(max=4096))
    boot = fields.Nested(BootConfigSchema, metadata={
        "description": "Fields given replace those stored; others stay."})
    properties = Properties(keys=fields.String())


class PartitionBootSchema(Schema):
    kernel_url = fields.String(allow_none=True, **ALWAYS)
    initrd_url = fields.String(allow_none=True, **ALWAYS)
    cmdline = fields.String(**ALWAYS, metadata={"description": "Empty when not set."})
    metal_boot_url = fields.String(allow_none=True, **ALWAYS)
    metal_hammer_version = fields.String(allow_none=True, **ALWAYS)
    boot_url = fields.String(allow_none=True, **ALWAYS)


class PartitionSchema(Schema):
    id = fields.String(**ALWAYS)
    description = fields.String(**ALWAYS)
    boot = fields.Nested(PartitionBootSchema, **ALWAYS)
    properties = fields.Dict(keys=fields.String(), **ALWAYS)
    machine_count = fields.Integer(**ALWAYS)
    created_at = Timestamp(**ALWAYS)
    updated_at = Timestamp(allow_none=True, **ALWAYS)


class PartitionListSchema(Schema):
    partitions = fields.List(fields.Nested(PartitionSchema), **ALWAYS)


# -- machines -----------------------------------------------------------------

class BmcInSchema(StrictSchema):
    address = BmcAddress(required=True, validate=validate.Length(max=1024))
    username = fields.String(validate=validate.Length(max=255))
    password = fields.String(load_only=True, validate=validate.Length(max=1024),
                             metadata={**ANY_TEXT, "description": "Write-only: never returned."})
    verify_tls = JsonBoolean()


class BmcPatchSchema(BmcInSchema):
    address = BmcAddress(validate=validate.Length(max=1024))


class BmcOutSchema(Schema):
    address = fields.String(**ALWAYS)
    username = fields.String(allow_none=True, **ALWAYS)
    verify_tls = fields.Boolean(**ALWAYS)
    password_set = fields.Boolean(**ALWAYS)


class NicSchema(StrictSchema):
    mac = MacAddress(required=True, metadata={
        "description": "Unicast MAC; '-' or ':' separated; returned lowercase with ':'."})
    duid = Duid(allow_none=True, metadata={"description": "DHCPv6 DUID of the NIC's firmware."})
    ipv4_address = Ipv4(allow_none=True)
    ipv6_address = Ipv6(allow_none=True)


class NicOutSchema(Schema):
    mac = fields.String(**ALWAYS, metadata={"description": "Lowercase, ':' separated."})
    duid = fields.String(allow_none=True, **ALWAYS)
    ipv4_address = fields.String(allow_none=True, **ALWAYS)
    ipv6_address = fields.String(allow_none=True, **ALWAYS)


def _unique_nics(nics):
    for key in ("mac", "duid"):
        seen = set()
        for nic in nics:
            value = nic.get(key)
            if value is None:
                continue
            if value in seen:
                raise ValidationError(f"{key} {value} is given twice.", "nics")
            seen.add(value)


class MachineCreateSchema(StrictSchema):
    id = MachineId(required=True, metadata={"description": "metal-api's machine UUID.",
                                            "format": "uuid"})
    partition = fields.String(required=True, validate=grammar(ipxe.NAME))
    bmc = fields.Nested(BmcInSchema, allow_none=True)
    nics = fields.List(fields.Nested(NicSchema), validate=validate.Length(max=64))
    boot_interface = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "Defaults to [DEFAULT] default_boot_interface."})
    boot_mode = fields.String(validate=validate.OneOf(BOOT_MODES))
    properties = Properties(keys=fields.String())

    @validates_schema
    def _check(self, data, **kwargs):
        _unique_nics(data.get("nics") or [])


class MachinePatchSchema(StrictSchema):
    class Meta(StrictSchema.Meta):
        openapi = {"minProperties": 1}

    partition = fields.String(validate=grammar(ipxe.NAME))
    bmc = fields.Nested(BmcPatchSchema, allow_none=True)
    nics = fields.List(fields.Nested(NicSchema), validate=validate.Length(max=64),
                       metadata={"description": "Replaces all NICs."})
    boot_interface = fields.String(validate=validate.Length(min=1, max=64))
    boot_mode = fields.String(validate=validate.OneOf(BOOT_MODES))
    state = fields.String(validate=validate.OneOf(SETTABLE_STATES), metadata={
        "description": "ready, or maintenance to keep migrations off the machine; "
                       "setting ready clears error (a machine whose boot interface is "
                       "not prepared yet becomes enrolling); enrolling asks the "
                       "conductor to prepare its boot interface again."})
    properties = Properties(keys=fields.String(), metadata={"description": "Replaces all."})

    @validates_schema
    def _check(self, data, **kwargs):
        if not data:
            raise ValidationError("Give at least one field to change.", "_schema")
        _unique_nics(data.get("nics") or [])


class LockSchema(Schema):
    holder = fields.String(**ALWAYS)
    since = Timestamp(**ALWAYS)


class MachineMigrationSchema(Schema):
    id = fields.String(**ALWAYS)
    step = fields.String(**ALWAYS)
    target_boot_interface = fields.String(**ALWAYS)
    last_error = fields.String(allow_none=True, **ALWAYS)


class MachineSchema(Schema):
    id = fields.String(**ALWAYS)
    partition = fields.String(**ALWAYS)
    bmc = fields.Nested(BmcOutSchema, allow_none=True, **ALWAYS)
    nics = fields.List(fields.Nested(NicOutSchema), **ALWAYS)
    boot_interface = fields.String(**ALWAYS)
    boot_mode = fields.String(validate=validate.OneOf(BOOT_MODES), **ALWAYS)
    state = fields.String(validate=validate.OneOf(MACHINE_STATES), **ALWAYS, metadata={
        "description": "enrolling until the conductor has prepared the boot interface "
                       "(DHCP entries, BMC settings), then ready; error names its cause "
                       "in last_error."})
    prepared_interface = fields.String(allow_none=True, **ALWAYS, metadata={
        "description": "The boot interface the machine is prepared for (null: not yet)."})
    last_error = fields.String(allow_none=True, **ALWAYS, metadata={
        "description": "Why the last enrolment failed, or why the machine is in error."})
    properties = fields.Dict(keys=fields.String(), **ALWAYS)
    lock = fields.Nested(LockSchema, allow_none=True, **ALWAYS)
    migration = fields.Nested(MachineMigrationSchema, allow_none=True, **ALWAYS)
    drift = fields.List(fields.String(), allow_none=True, **ALWAYS)
    drift_checked_at = Timestamp(allow_none=True, **ALWAYS)
    created_at = Timestamp(**ALWAYS)
    updated_at = Timestamp(allow_none=True, **ALWAYS)


class MachineListSchema(Schema):
    machines = fields.List(fields.Nested(MachineSchema), **ALWAYS)
    next_marker = fields.String(allow_none=True, **ALWAYS, metadata={
        "description": "Pass as marker to get the next page; null on the last page."})


class MachineCreatedSchema(Schema):
    machines = fields.List(fields.Nested(MachineSchema), **ALWAYS)
    count = fields.Integer(**ALWAYS)


class MachineListQuerySchema(StrictSchema):
    partition = fields.String(validate=validate.Length(max=128))
    boot_interface = fields.String(validate=validate.Length(max=64))
    state = fields.String(validate=validate.OneOf(MACHINE_STATES))
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    marker = fields.String(validate=validate.Length(max=64), metadata={
        "description": "Id of the last machine of the previous page."})


class ValidateRequestSchema(StrictSchema):
    boot_interface = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "Defaults to the machine's current boot interface."})


def field_messages(**kwargs):
    """What ``fields`` of an error holds: messages by field name."""
    return fields.Dict(keys=fields.String(), values=fields.List(fields.String()), **kwargs)


class ValidateResultSchema(Schema):
    machine_id = fields.String(**ALWAYS)
    boot_interface = fields.String(**ALWAYS)
    valid = fields.Boolean(**ALWAYS)
    reason = fields.String(allow_none=True, **ALWAYS)
    fields_ = field_messages(data_key="fields", **ALWAYS)


# -- events -------------------------------------------------------------------

class EventSchema(Schema):
    id = fields.Integer(**ALWAYS, metadata=INT64)
    kind = fields.String(**ALWAYS)
    message = fields.String(**ALWAYS)
    machine_id = fields.String(allow_none=True, **ALWAYS)
    migration_id = fields.String(allow_none=True, **ALWAYS)
    data = fields.Dict(keys=fields.String(), allow_none=True, **ALWAYS)
    created_at = Timestamp(**ALWAYS)


class EventListSchema(Schema):
    events = fields.List(fields.Nested(EventSchema), **ALWAYS)
    next_cursor = fields.Integer(**ALWAYS, metadata={
        **INT64, "description": "Pass as since= to get the events after these."})


class MachineDeleteQuerySchema(StrictSchema):
    force = fields.Boolean(load_default=False, metadata={
        "description": "Forget the machine now, without the conductor cleaning up what "
                       "its boot interface prepared (DHCP entries, boot overrides)."})


class EventQuerySchema(StrictSchema):
    since = fields.Integer(validate=validate.Range(min=0, max=MAX_CURSOR), load_default=0,
                           metadata=INT64)
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))


# -- boot interfaces ----------------------------------------------------------

class PropertyDocSchema(Schema):
    description = fields.String(**ALWAYS)
    required = fields.Boolean(**ALWAYS)


class BootInterfaceSchema(Schema):
    name = fields.String(**ALWAYS)
    description = fields.String(**ALWAYS)
    default = fields.Boolean(**ALWAYS)
    capabilities = fields.List(fields.String(), **ALWAYS)
    properties = fields.Dict(keys=fields.String(), values=fields.Nested(PropertyDocSchema),
                             **ALWAYS)
    evidence_artifacts = fields.List(fields.String(), **ALWAYS)
    accepts_boot_report = fields.Boolean(**ALWAYS)


class BootInterfaceListSchema(Schema):
    boot_interfaces = fields.List(fields.Nested(BootInterfaceSchema), **ALWAYS)


class BootReportSchema(StrictSchema):
    boot_interface = fields.String(required=True, validate=validate.Length(min=1, max=64),
                                   metadata={"description": "The interface the machine "
                                             "booted through (METAL_BOOT_INTERFACE)."})
    message = fields.String(validate=validate.Length(max=4096), metadata=ANY_TEXT)
    token = fields.String(validate=validate.Length(max=256), metadata={
        "description": "The per-machine token, if not sent as a bearer token."})


class BootReportResultSchema(Schema):
    machine_id = fields.String(**ALWAYS)
    evidence_id = fields.Integer(**ALWAYS, metadata=INT64)


class RootSchema(Schema):
    name = fields.String(**ALWAYS)
    version = fields.String(**ALWAYS)
    links = fields.Dict(keys=fields.String(), values=fields.String(), **ALWAYS, metadata={
        "description": "Path of each collection, by name."})


class ErrorBodySchema(Schema):
    code = fields.Integer(**ALWAYS, metadata={"description": "The HTTP status code."})
    message = fields.String(**ALWAYS)
    fields_ = field_messages(data_key="fields", **ALWAYS, metadata={
        "description": "Messages by field (a dotted path into the body, a query "
                       "parameter, or _schema for the body as a whole); empty if the "
                       "error is not about fields."})


class ErrorSchema(Schema):
    error = fields.Nested(ErrorBodySchema, **ALWAYS)


# -- migrations -----------------------------------------------------------------

MIGRATION_STATES = migration_states.STATES
MIGRATION_RESULTS = migration_states.RESULTS
MACHINE_STEPS = machine_steps.ALL


class MaxFailures(fields.Field):
    """A count (int) or a share of the machines ("10%")."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool):
            raise ValidationError("Give a count (e.g. 3) or a percentage (e.g. \"10%\").")
        if isinstance(value, int):
            if not 0 <= value <= 10 ** 9:
                raise ValidationError("Must be between 0 and 1000000000.")
            return {"count": value}
        if isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}(\.[0-9]+)?%", value):
            pct = float(value[:-1])
            if pct > 100:
                raise ValidationError("A percentage is at most 100%.")
            return {"percent": pct}
        raise ValidationError("Give a count (e.g. 3) or a percentage (e.g. \"10%\").")

    def _serialize(self, value, attr, obj, **kwargs):
        return value


class SelectorSchema(StrictSchema):
    class Meta(StrictSchema.Meta):
        # machines xor partition, and the filters with partition only (see
        # _one_kind), as JSON Schema: generated clients keep one plain type
        openapi = {
            "description": "Give either machines or partition (boot_interface and state "
                           "filter a partition).",
            "not": {"anyOf": [
                {"required": ["machines", "partition"]},
                {"required": ["machines", "boot_interface"]},
                {"required": ["machines", "state"]},
                {"not": {"anyOf": [{"required": ["machines"]}, {"required": ["partition"]}]}},
            ]}}

    machines = fields.List(MachineId(), validate=validate.Length(min=1, max=10000),
                           metadata={"description": "Machine ids; or give partition.",
                                     "uniqueItems": True})
    partition = fields.String(validate=grammar(ipxe.NAME))
    boot_interface = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "With partition: only machines now on this boot interface."})
    state = fields.String(validate=validate.OneOf((State.READY.value,)), metadata={
        "description": "With partition: only machines in this state (ready)."})

    @validates_schema
    def _one_kind(self, data, **kwargs):
        if ("machines" in data) == ("partition" in data):
            raise ValidationError("Give either machines or partition.", "_schema")
        if "machines" in data and ({"boot_interface", "state"} & set(data)):
            raise ValidationError("boot_interface and state filter a partition selector only.",
                                  "_schema")
        twice = sorted(m for m, n in collections.Counter(data.get("machines", ())).items()
                       if n > 1)
        if twice:
            raise ValidationError(f"Machines given twice: {', '.join(twice[:10])}.", "machines")


class MigrationCreateSchema(StrictSchema):
    selector = fields.Nested(SelectorSchema, required=True)
    boot_interface = fields.String(required=True, validate=validate.Length(min=1, max=64),
                                   metadata={"description": "The target boot interface."})
    max_parallel = JsonInteger(load_default=10, validate=validate.Range(min=1, max=5000),
                                  metadata={"description": "Machines in flight at once."})
    max_failures = MaxFailures(load_default=None, allow_none=True, metadata={
        "description": "Count or percentage (\"10%\") of failed machines beyond which no "
                       "new machine starts and the migration halts. Default: no limit.",
        "oneOf": [{"type": "integer", "minimum": 0, "maximum": 10 ** 9},
                  {"type": "string", "pattern": "^[0-9]{1,3}(\\.[0-9]+)?%$"}]})
    canary = JsonInteger(load_default=0, validate=validate.Range(min=0, max=10000), metadata={
        "description": "The first N machines must all succeed before the rest start; "
                       "a canary that a veto skips is replaced by the next queued "
                       "machine."})
    boot_timeout = JsonInteger(validate=validate.Range(min=1, max=86400), metadata={
        "description": "Seconds from activation to boot evidence; default "
                       "[conductor] default_boot_timeout."})
    dry_run = JsonBoolean(load_default=False, metadata={
        "description": "Validate every selected machine against the target; change nothing."})
    require_boot_report = JsonBoolean(load_default=False, metadata={
        "description": "A machine is done only when the system it booted posted its boot "
                       "report through the target (POST /v1/machines/{id}/boot-report), "
                       "not already when the firmware or iPXE fetched its first artifact."})


class MaxFailuresOutSchema(Schema):
    count = fields.Integer(metadata={"description": "A number of machines."})
    percent = fields.Float(metadata={"description": "A share of the machines, in percent."})


class MigrationOptionsSchema(Schema):
    max_parallel = fields.Integer(**ALWAYS)
    max_failures = fields.Nested(MaxFailuresOutSchema, allow_none=True, **ALWAYS, metadata={
        "description": "count or percent; null: no limit."})
    canary = fields.Integer(**ALWAYS)
    dry_run = fields.Boolean(**ALWAYS)
    boot_timeout = fields.Integer(**ALWAYS, metadata={"description": "Seconds."})
    require_boot_report = fields.Boolean(**ALWAYS, metadata={
        "description": "Only a boot report counts as evidence."})


class MigrationSchema(Schema):
    id = fields.String(**ALWAYS)
    state = fields.String(validate=validate.OneOf(MIGRATION_STATES), **ALWAYS, metadata={
        "description": "running, paused, cancelling; halting (past its failure budget or "
                       "with a failed canary: nothing new starts, machines in flight carry "
                       "on) until those machines have ended, then halted; done, halted and "
                       "cancelled are final. The state does not say how the machines "
                       "fared: see result."})
    result = fields.String(allow_none=True, validate=validate.OneOf(MIGRATION_RESULTS),
                           **ALWAYS,
                           metadata={"description": "Set once the state is final: succeeded "
                                     "(no machine failed), partially_failed (some failed, "
                                     "some succeeded), failed (machines failed, none "
                                     "succeeded), not_run (all cancelled or skipped). "
                                     "null while the migration is live."})
    succeeded = fields.Integer(**ALWAYS, metadata={
        "description": "Machines that ended done (valid, in a dry run)."})
    failed = fields.Integer(**ALWAYS, metadata={
        "description": "Machines that ended rolled_back, rollback_failed or invalid."})
    boot_interface = fields.String(**ALWAYS)
    selector = fields.Nested(SelectorSchema, **ALWAYS)
    options = fields.Nested(MigrationOptionsSchema, **ALWAYS)
    total = fields.Integer(**ALWAYS)
    counts = fields.Dict(keys=fields.String(), values=fields.Integer(), **ALWAYS, metadata={
        "description": "Machines per step."})
    progress = fields.Float(**ALWAYS, metadata={"description": "Share of machines finished, 0..1."})
    reason = fields.String(allow_none=True, **ALWAYS)
    created_at = Timestamp(**ALWAYS)
    started_at = Timestamp(allow_none=True, **ALWAYS)
    finished_at = Timestamp(allow_none=True, **ALWAYS)
    estimated_completion = Timestamp(allow_none=True, **ALWAYS)


class MigrationListSchema(Schema):
    migrations = fields.List(fields.Nested(MigrationSchema), **ALWAYS)
    next_marker = fields.String(allow_none=True, **ALWAYS)


class MigrationListQuerySchema(StrictSchema):
    state = fields.String(validate=validate.OneOf(MIGRATION_STATES))
    result = fields.String(validate=validate.OneOf(MIGRATION_RESULTS), metadata={
        "description": "Only finished migrations with this result."})
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    marker = fields.String(validate=validate.Length(max=64))


class EvidenceSchema(Schema):
    id = fields.Integer(**ALWAYS, metadata=INT64)
    interface = fields.String(**ALWAYS, metadata={
        "description": "The boot interface fetched through."})
    kind = fields.String(**ALWAYS, metadata={"description": "fetch (of a per-machine artifact), "
                                                       "report (a boot report) or unverified "
                                                       "(a fetch by MAC from an address not "
                                                       "bound to the machine, or what carried "
                                                       "the token it got): proves no boot."})
    path = fields.String(**ALWAYS)
    client_address = fields.String(allow_none=True, **ALWAYS)
    created_at = Timestamp(**ALWAYS)
    binding = fields.String(allow_none=True, **ALWAYS, metadata={
        "description": "A fetch by MAC: how its address was bound to the machine "
                       "(eui64, nic-address, prefix, dhcp-lease, unbound); null otherwise."})
    lease = fields.Nested("EvidenceLeaseSchema", allow_none=True, **ALWAYS, metadata={
        "description": "binding dhcp-lease: the DHCP server's lease that bound it."})


class EvidenceListSchema(Schema):
    evidence = fields.List(fields.Nested(EvidenceSchema), **ALWAYS)
    next_cursor = fields.Integer(**ALWAYS, metadata={
        **INT64, "description": "Pass as since= to get the evidence recorded after this."})


class MigrationMachineSchema(Schema):
    machine_id = fields.String(**ALWAYS)
    position = fields.Integer(**ALWAYS)
    canary = fields.Boolean(**ALWAYS)
    source_boot_interface = fields.String(**ALWAYS)
    state = fields.String(validate=validate.OneOf(MACHINE_STEPS), **ALWAYS)
    attempt = fields.Integer(**ALWAYS)
    last_error = fields.String(allow_none=True, **ALWAYS)
    started_at = Timestamp(allow_none=True, **ALWAYS)
    activated_at = Timestamp(allow_none=True, **ALWAYS)
    finished_at = Timestamp(allow_none=True, **ALWAYS)
    evidence = fields.Nested(EvidenceSchema, allow_none=True, **ALWAYS)
    seconds_to_evidence = fields.Float(allow_none=True, **ALWAYS)


class MigrationMachineListSchema(Schema):
    machines = fields.List(fields.Nested(MigrationMachineSchema), **ALWAYS)
    next_marker = fields.Integer(allow_none=True, **ALWAYS, metadata={
        "description": "Position of the last machine of this page."})


class MigrationMachineQuerySchema(StrictSchema):
    state = fields.String(validate=validate.OneOf(MACHINE_STEPS))
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    marker = fields.Integer(validate=validate.Range(min=-1, max=MAX_CURSOR), metadata=INT64)


class FeedQuerySchema(StrictSchema):
    since = fields.Integer(validate=validate.Range(min=0, max=MAX_CURSOR), load_default=0,
                           metadata={**INT64, "description": "Cursor: the next_cursor of the "
                                                             "previous answer (0: from the "
                                                             "start)."})
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    machine_id = fields.String(validate=validate.Length(max=64))
    migration_id = fields.String(validate=validate.Length(max=64))


# -- partition boot agents ------------------------------------------------------

class AgentTokenCreateSchema(StrictSchema):
    description = fields.String(validate=validate.Length(max=4096), metadata={
        "description": "Where the token is used (e.g. the agents' hosts)."})


class AgentTokenRotateQuerySchema(StrictSchema):
    grace = fields.Integer(validate=validate.Range(min=0, max=7 * 86400), load_default=600,
                           metadata={"description": "Seconds the old token stays valid."})


class AgentTokenSchema(Schema):
    id = fields.String(**ALWAYS)
    partition = fields.String(**ALWAYS)
    description = fields.String(**ALWAYS)
    created_at = Timestamp(**ALWAYS)
    expires_at = Timestamp(allow_none=True, **ALWAYS, metadata={
        "description": "Null: valid until revoked (a rotated token expires)."})
    last_used_at = Timestamp(allow_none=True, **ALWAYS)


class AgentTokenCreatedSchema(AgentTokenSchema):
    token = fields.String(**ALWAYS, metadata={
        "description": "The token, shown only now: put it in the agents' [agent] token_file."})
    replaces = fields.String(allow_none=True, **ALWAYS, metadata={
        "description": "Rotation: the token replaced (null when made anew)."})
    replaced_expires_at = Timestamp(allow_none=True, **ALWAYS, metadata={
        "description": "Rotation: when the replaced token stops working."})


class AgentTokenListSchema(Schema):
    agent_tokens = fields.List(fields.Nested(AgentTokenSchema), **ALWAYS)


class BootDataPartitionSchema(PartitionBootSchema):
    id = fields.String(**ALWAYS)
    properties = fields.Dict(keys=fields.String(), **ALWAYS)


class BootDataNicSchema(Schema):
    mac = fields.String(**ALWAYS)
    duid = fields.String(allow_none=True, **ALWAYS)
    ipv4_address = fields.String(allow_none=True, **ALWAYS)
    ipv6_address = fields.String(allow_none=True, **ALWAYS)


class BootDataMachineSchema(Schema):
    id = fields.String(**ALWAYS)
    partition_id = fields.String(**ALWAYS)
    boot_interface = fields.String(**ALWAYS)
    boot_mode = fields.String(**ALWAYS)
    state = fields.String(**ALWAYS)
    properties = fields.Dict(keys=fields.String(), **ALWAYS)
    token_generation = fields.Integer(**ALWAYS)
    prepared_interface = fields.String(allow_none=True, **ALWAYS)
    nics = fields.List(fields.Nested(BootDataNicSchema), **ALWAYS)
    booting_to = fields.List(fields.String(), **ALWAYS, metadata={
        "description": "Targets of the migrations booting the machine now."})
    tokens = fields.Dict(keys=fields.String(), values=fields.List(fields.String()), **ALWAYS,
                         metadata={"description": "Per enabled interface: the machine's "
                                   "token and its unbound token."})
    dhcp = fields.Dict(keys=fields.String(), values=fields.List(fields.Nested(
        "DhcpHostEntrySchema")), **ALWAYS, metadata={
        "description": "Per boot interface that answers by DHCP: the host entries "
                       "(one per NIC) the partition's DHCP servers answer the machine "
                       "with, as the interface's prepare step published them."})


class DhcpOptionSchema(Schema):
    code = fields.Integer(**ALWAYS)
    value = fields.String(**ALWAYS)
    version = fields.Integer(**ALWAYS, metadata={"description": "4 or 6."})
    hex = fields.Boolean(**ALWAYS)
    when = fields.List(fields.String(), **ALWAYS, metadata={
        "description": "Conditions on the asking client, all of which must hold."})
    always_send = fields.Boolean(**ALWAYS)


class DhcpHostEntrySchema(Schema):
    mac = fields.String(**ALWAYS)
    duid = fields.String(allow_none=True, **ALWAYS)
    ipv4_address = fields.String(allow_none=True, **ALWAYS)
    ipv6_address = fields.String(allow_none=True, **ALWAYS)
    options = fields.List(fields.Nested(DhcpOptionSchema), **ALWAYS)


class BootDataSchema(Schema):
    partition = fields.Nested(BootDataPartitionSchema, **ALWAYS)
    interfaces = fields.List(fields.String(), **ALWAYS)
    machines = fields.List(fields.Nested(BootDataMachineSchema), **ALWAYS)
    cursor = fields.Integer(**ALWAYS, metadata=INT64)
    generated_at = Timestamp(**ALWAYS)


class BootDataChangesQuerySchema(StrictSchema):
    since = fields.Integer(required=True, validate=validate.Range(min=0, max=MAX_CURSOR),
                           metadata=INT64)
    wait = fields.Float(validate=validate.Range(min=0, max=30), load_default=0.0, metadata={
        "description": "Seconds to wait for a change (long poll)."})


class BootDataChangesSchema(Schema):
    cursor = fields.Integer(**ALWAYS, metadata=INT64)
    partition = fields.Nested(BootDataPartitionSchema, allow_none=True, **ALWAYS)
    machines = fields.List(fields.Nested(BootDataMachineSchema), **ALWAYS)
    removed = fields.List(fields.String(), **ALWAYS)
    more = fields.Boolean(**ALWAYS)


AGENT_ID = "^[A-Za-z0-9._-]{1,64}$"
JOURNAL_ID = "^[A-Za-z0-9._-]{1,32}$"


class EvidenceDataSchema(StrictSchema):
    """What an evidence record keeps beside its kind and path, as the boot
    server writes it."""
    range = fields.String(validate=validate.Length(max=4096), metadata={
        "description": "The Range header of the fetch."})
    by_mac = fields.String(validate=validate.Length(max=64), metadata={
        "description": "How a fetch by MAC was bound to the machine."})
    lease = fields.Nested("EvidenceLeaseSchema", metadata={
        "description": "by_mac dhcp-lease: the lease of the DHCP server beside the "
                       "agent that bound the fetch to the machine."})
    # a boot report's message as the machine sent it (its own rules: any text but NUL)
    message = fields.String(validate=[validate.Length(max=4096),
                                      validate.Regexp("^[^\\x00]*$")], metadata=ANY_TEXT)


class EvidenceLeaseSchema(StrictSchema):
    address = fields.String(required=True, validate=validate.Length(max=64))
    mac = fields.String(required=True, validate=validate.Regexp(
        "^[0-9a-f]{2}(:[0-9a-f]{2}){5}$"))
    expires = fields.Integer(required=True, strict=True,
                             validate=validate.Range(min=0, max=MAX_CURSOR),
                             metadata=dict(INT64, description="Epoch seconds; 0: never."))
    server = fields.String(required=True, validate=validate.OneOf(("dnsmasq", "Kea")))


class EvidenceRecordSchema(StrictSchema):
    seq = fields.Integer(required=True, validate=validate.Range(min=1, max=MAX_CURSOR),
                         metadata=INT64)
    machine_id = fields.String(required=True, validate=validate.Length(min=1, max=64))
    interface = fields.String(required=True, validate=validate.Length(min=1, max=64))
    kind = fields.String(required=True, validate=validate.OneOf(("fetch", "report",
                                                                 "unverified")))
    path = fields.String(required=True, validate=validate.Length(max=4096))
    client_address = fields.String(allow_none=True, validate=validate.Length(max=64))
    data = fields.Nested(EvidenceDataSchema, allow_none=True)
    created_at = fields.AwareDateTime(required=True, default_timezone=datetime.timezone.utc)


class EvidenceDeliverySchema(StrictSchema):
    agent = fields.String(required=True, validate=validate.Regexp(AGENT_ID), metadata={
        "description": "The agent's id ([agent] agent_id)."})
    journal = fields.String(required=True, validate=validate.Regexp(JOURNAL_ID), metadata={
        "description": "The id of the agent's journal, made when the journal is begun: "
                       "agent, journal and seq are the idempotency key."})
    records = fields.List(fields.Nested(EvidenceRecordSchema), required=True,
                          validate=validate.Length(min=1, max=1000))


class DhcpReportSchema(StrictSchema):
    agent = fields.String(required=True, validate=validate.Regexp(AGENT_ID), metadata={
        "description": "The agent's id ([agent] agent_id)."})
    cursor = fields.Integer(required=True, validate=validate.Range(min=0, max=MAX_CURSOR),
                            metadata=dict(INT64, description=(
                                "The boot data cursor up to which the agent's DHCP "
                                "servers hold the partition's DHCP entries.")))
    interfaces = fields.List(fields.String(validate=validate.Length(min=1, max=64)),
                             required=True, validate=validate.Length(max=64), metadata={
                                 "description": "The boot interfaces whose entries the "
                                                "agent applies (those with a DHCP backend "
                                                "in its configuration)."})
    entries = fields.Integer(required=True, validate=validate.Range(min=0, max=MAX_CURSOR),
                             metadata={"description": "Machines with entries it holds."})
    error = fields.String(allow_none=True, load_default=None,
                          validate=validate.Length(max=4096), metadata=dict(ANY_TEXT, **{
                              "description": "Why the entries after cursor are not "
                                             "applied (null: nothing failed)."}))


class DhcpAgentSchema(Schema):
    agent = fields.String(**ALWAYS)
    cursor = fields.Integer(**ALWAYS, metadata=INT64)
    interfaces = fields.List(fields.String(), **ALWAYS)
    entries = fields.Integer(**ALWAYS)
    error = fields.String(allow_none=True, **ALWAYS)
    reported_at = Timestamp(**ALWAYS)
    fresh = fields.Boolean(**ALWAYS, metadata={
        "description": "Reported within [dhcp] agent_timeout: prepare steps wait for it."})


class DhcpAgentListSchema(Schema):
    cursor = fields.Integer(**ALWAYS, metadata=dict(INT64, description=(
        "The partition's newest boot data cursor.")))
    agents = fields.List(fields.Nested(DhcpAgentSchema), **ALWAYS)


class EvidenceDeliveryResultSchema(Schema):
    stored = fields.Integer(**ALWAYS)
    duplicates = fields.Integer(**ALWAYS)
    refused = fields.Integer(**ALWAYS)
