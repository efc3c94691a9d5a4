"""Marshmallow schemas: the one source of request validation and of the OpenAPI document.

Request schemas reject unknown fields; response schemas describe what the API
returns (the handlers build plain dicts of that shape; tests check them against
the served OpenAPI document).
"""

import collections
import ipaddress
import re
import urllib.parse
import uuid

from marshmallow import RAISE, Schema, ValidationError, fields, validate, validates_schema

MAC_RE = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$", re.I)
DUID_RE = re.compile(r"^[0-9a-f]{2}(:?[0-9a-f]{2})+$", re.I)
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
NAME_ERROR = "Must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit."

BOOT_MODES = ("uefi", "bios")
SETTABLE_STATES = ("ready", "maintenance", "enrolling")
MACHINE_STATES = ("enrolling", "ready", "migrating", "maintenance", "error", "deleting")
MAX_PAGE_SIZE = 1000
MAX_CURSOR = 2 ** 63 - 1  # a database BIGINT


class StrictSchema(Schema):
    class Meta:
        unknown = RAISE


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


# Characters that end or split a line of an iPXE script (or of a log).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _one_word(text):
    """Whether ``text`` holds no white space or other unprintable character."""
    return all(c.isprintable() and not c.isspace() for c in text)


def no_control_characters(value):
    if _CONTROL.search(value):
        raise ValidationError("Control characters (line breaks, tabs...) are not allowed.")


def one_ipxe_command(value):
    """Words that go onto the ``kernel`` line of boot.ipxe: iPXE ends a command
    at a word ``||``, ``&&`` or ``;`` (and runs what follows as a command of its
    own) and at a word that begins with ``#`` (the rest, the machine's token
    among it, would be a comment)."""
    if any(word in ("||", "&&", ";") or word.startswith("#") for word in value.split()):
        raise ValidationError("The words ||, && and ; and words beginning with # are not "
                              "allowed: iPXE would end the kernel command there.")


class MacAddress(fields.String):
    """A unicast MAC, given with ':' or '-'; stored lowercase with ':'."""

    default_error_messages = {
        "invalid_mac": "Not a valid MAC address (expected aa:bb:cc:dd:ee:ff)."}

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        if not MAC_RE.match(value):
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

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        if not DUID_RE.match(value) or (":" in value and not re.match(
                r"^[0-9a-f]{2}(:[0-9a-f]{2})+$", value, re.I)):
            raise ValidationError("Not a valid DUID (hex octets, e.g. 00:01:00:01:...).")
        raw = value.replace(":", "").lower()
        octets = [raw[i:i + 2] for i in range(0, len(raw), 2)]
        if not 3 <= len(octets) <= 130:
            raise ValidationError("A DUID has 3 to 130 octets.")
        return ":".join(octets)


class HttpUrl(fields.String):
    """An absolute http(s) URL."""

    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs).strip()
        try:
            parsed = urllib.parse.urlsplit(value)
            parsed.port  # noqa: B018  (raises on a bad port)
        except ValueError as exc:
            raise ValidationError(f"Not a valid URL: {exc}.")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValidationError("Not a valid http(s) URL.")
        if not _one_word(value):  # it goes into iPXE scripts as one word
            raise ValidationError("A URL contains no white space or control characters.")
        return value


class BmcAddress(fields.String):
    """A BMC: host, host:port, [v6]:port, or http(s)://host[:port]; stored as a URL."""

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
    def _deserialize(self, value, attr, data, **kwargs):
        value = super()._deserialize(value, attr, data, **kwargs)
        try:
            return str(ipaddress.IPv4Address(value))
        except ValueError:
            raise ValidationError("Not a valid IPv4 address.")


class Ipv6(fields.String):
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


# -- partitions ---------------------------------------------------------------

class BootConfigSchema(StrictSchema):
    kernel_url = HttpUrl(allow_none=True, metadata={"description": "Kernel (metal-hammer) URL."})
    initrd_url = HttpUrl(allow_none=True, metadata={"description": "Initrd URL."})
    cmdline = fields.String(validate=[validate.Length(max=4096), no_control_characters,
                                      one_ipxe_command],
                            metadata={"description": "Kernel command line: one line, without "
                                                     "the words ||, && and ; or a word "
                                                     "beginning with #, which would end "
                                                     "iPXE's kernel command."})
    metal_boot_url = HttpUrl(allow_none=True,
                             metadata={"description": "Base URL of metal-boot in the partition."})
    metal_hammer_version = fields.String(allow_none=True, validate=[
        validate.Length(max=128), no_control_characters])


class PartitionCreateSchema(StrictSchema):
    id = fields.String(required=True, validate=validate.Regexp(NAME_RE, error=NAME_ERROR))
    description = fields.String(validate=validate.Length(max=4096))
    boot = fields.Nested(BootConfigSchema)
    properties = fields.Dict(keys=fields.String())


class PartitionPatchSchema(StrictSchema):
    description = fields.String(validate=validate.Length(max=4096))
    boot = fields.Nested(BootConfigSchema, metadata={
        "description": "Fields given replace those stored; others stay."})
    properties = fields.Dict(keys=fields.String())


class PartitionSchema(Schema):
    id = fields.String()
    description = fields.String()
    boot = fields.Nested(BootConfigSchema)
    properties = fields.Dict()
    machine_count = fields.Integer()
    created_at = fields.String()
    updated_at = fields.String(allow_none=True)


class PartitionListSchema(Schema):
    partitions = fields.List(fields.Nested(PartitionSchema))


# -- machines -----------------------------------------------------------------

class BmcInSchema(StrictSchema):
    address = BmcAddress(required=True, validate=validate.Length(max=1024))
    username = fields.String(validate=validate.Length(max=255))
    password = fields.String(load_only=True, validate=validate.Length(max=1024),
                             metadata={"description": "Write-only: never returned."})
    verify_tls = JsonBoolean()


class BmcPatchSchema(BmcInSchema):
    address = BmcAddress(validate=validate.Length(max=1024))


class BmcOutSchema(Schema):
    address = fields.String()
    username = fields.String(allow_none=True)
    verify_tls = fields.Boolean()
    password_set = fields.Boolean()


class NicSchema(StrictSchema):
    mac = MacAddress(required=True, metadata={
        "pattern": "^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$",
        "description": "Unicast MAC; '-' or ':' separated; returned lowercase with ':'."})
    duid = Duid(allow_none=True, metadata={"description": "DHCPv6 DUID of the NIC's firmware."})
    ipv4_address = Ipv4(allow_none=True)
    ipv6_address = Ipv6(allow_none=True)


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
    partition = fields.String(required=True, validate=validate.Regexp(NAME_RE, error=NAME_ERROR))
    bmc = fields.Nested(BmcInSchema, allow_none=True)
    nics = fields.List(fields.Nested(NicSchema), validate=validate.Length(max=64))
    boot_interface = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "Defaults to [DEFAULT] default_boot_interface."})
    boot_mode = fields.String(validate=validate.OneOf(BOOT_MODES))
    properties = fields.Dict(keys=fields.String())

    @validates_schema
    def _check(self, data, **kwargs):
        _unique_nics(data.get("nics") or [])


class MachinePatchSchema(StrictSchema):
    partition = fields.String(validate=validate.Regexp(NAME_RE, error=NAME_ERROR))
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
    properties = fields.Dict(keys=fields.String(), metadata={"description": "Replaces all."})

    @validates_schema
    def _check(self, data, **kwargs):
        if not data:
            raise ValidationError("Give at least one field to change.", "_schema")
        _unique_nics(data.get("nics") or [])


class LockSchema(Schema):
    holder = fields.String()
    since = fields.String()


class MachineMigrationSchema(Schema):
    id = fields.String()
    step = fields.String()
    target_boot_interface = fields.String()
    last_error = fields.String(allow_none=True)


class MachineSchema(Schema):
    id = fields.String()
    partition = fields.String()
    bmc = fields.Nested(BmcOutSchema, allow_none=True)
    nics = fields.List(fields.Nested(NicSchema))
    boot_interface = fields.String()
    boot_mode = fields.String(validate=validate.OneOf(BOOT_MODES))
    state = fields.String(validate=validate.OneOf(MACHINE_STATES), metadata={
        "description": "enrolling until the conductor has prepared the boot interface "
                       "(DHCP entries, BMC settings), then ready; error names its cause "
                       "in last_error."})
    prepared_interface = fields.String(allow_none=True, metadata={
        "description": "The boot interface the machine is prepared for (null: not yet)."})
    last_error = fields.String(allow_none=True, metadata={
        "description": "Why the last enrolment failed, or why the machine is in error."})
    properties = fields.Dict()
    lock = fields.Nested(LockSchema, allow_none=True)
    migration = fields.Nested(MachineMigrationSchema, allow_none=True)
    drift = fields.List(fields.String(), allow_none=True)
    drift_checked_at = fields.String(allow_none=True)
    created_at = fields.String()
    updated_at = fields.String(allow_none=True)


class MachineListSchema(Schema):
    machines = fields.List(fields.Nested(MachineSchema))
    next_marker = fields.String(allow_none=True, metadata={
        "description": "Pass as marker to get the next page; null on the last page."})


class MachineCreatedSchema(Schema):
    machines = fields.List(fields.Nested(MachineSchema))
    count = fields.Integer()


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


class ValidateResultSchema(Schema):
    machine_id = fields.String()
    boot_interface = fields.String()
    valid = fields.Boolean()
    reason = fields.String(allow_none=True)
    fields_ = fields.Dict(data_key="fields")


# -- events -------------------------------------------------------------------

class EventSchema(Schema):
    id = fields.Integer()
    kind = fields.String()
    message = fields.String()
    machine_id = fields.String(allow_none=True)
    migration_id = fields.String(allow_none=True)
    data = fields.Dict(allow_none=True)
    created_at = fields.String()


class EventListSchema(Schema):
    events = fields.List(fields.Nested(EventSchema))
    next_cursor = fields.Integer(metadata={
        "description": "Pass as since= to get the events after these."})


class MachineDeleteQuerySchema(StrictSchema):
    force = fields.Boolean(load_default=False, metadata={
        "description": "Forget the machine now, without the conductor cleaning up what "
                       "its boot interface prepared (DHCP entries, boot overrides)."})


class EventQuerySchema(StrictSchema):
    since = fields.Integer(validate=validate.Range(min=0, max=MAX_CURSOR), load_default=0)
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))


# -- boot interfaces ----------------------------------------------------------

class PropertyDocSchema(Schema):
    description = fields.String()
    required = fields.Boolean()


class BootInterfaceSchema(Schema):
    name = fields.String()
    description = fields.String()
    default = fields.Boolean()
    capabilities = fields.List(fields.String())
    properties = fields.Dict(keys=fields.String(), values=fields.Nested(PropertyDocSchema))
    evidence_artifacts = fields.List(fields.String())
    accepts_boot_report = fields.Boolean()


class BootInterfaceListSchema(Schema):
    boot_interfaces = fields.List(fields.Nested(BootInterfaceSchema))


class BootReportSchema(StrictSchema):
    boot_interface = fields.String(required=True, validate=validate.Length(min=1, max=64),
                                   metadata={"description": "The interface the machine "
                                             "booted through (METAL_BOOT_INTERFACE)."})
    message = fields.String(validate=validate.Length(max=4096))
    token = fields.String(validate=validate.Length(max=256), metadata={
        "description": "The per-machine token, if not sent as a bearer token."})


class BootReportResultSchema(Schema):
    machine_id = fields.String()
    evidence_id = fields.Integer()


class RootSchema(Schema):
    name = fields.String()
    version = fields.String()
    links = fields.Dict()


class ErrorBodySchema(Schema):
    code = fields.Integer()
    message = fields.String()
    fields_ = fields.Dict(data_key="fields")


class ErrorSchema(Schema):
    error = fields.Nested(ErrorBodySchema)


# -- migrations -----------------------------------------------------------------

MIGRATION_STATES = ("running", "paused", "cancelling", "cancelled", "halted", "done")
MACHINE_STEPS = ("queued", "validating", "preparing", "activating", "awaiting_boot",
                 "verifying", "done", "rolling_back", "rolled_back", "rollback_failed",
                 "skipped", "cancelled", "valid", "invalid")


class MaxFailures(fields.Field):
    """A count (int) or a share of the machines ("10%")."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool):
            raise ValidationError("Give a count (e.g. 3) or a percentage (e.g. \"10%\").")
        if isinstance(value, int):
            if not 0 <= value <= 10 ** 9:
                raise ValidationError("Must be between 0 and 1000000000.")
            return {"count": value}
        if isinstance(value, str) and re.fullmatch(r"\d{1,3}(\.\d+)?%", value.strip()):
            pct = float(value.strip()[:-1])
            if pct > 100:
                raise ValidationError("A percentage is at most 100%.")
            return {"percent": pct}
        raise ValidationError("Give a count (e.g. 3) or a percentage (e.g. \"10%\").")

    def _serialize(self, value, attr, obj, **kwargs):
        return value


class SelectorSchema(StrictSchema):
    machines = fields.List(MachineId(), validate=validate.Length(min=1, max=10000),
                           metadata={"description": "Machine ids; or give partition."})
    partition = fields.String(validate=validate.Regexp(NAME_RE, error=NAME_ERROR))
    boot_interface = fields.String(validate=validate.Length(min=1, max=64), metadata={
        "description": "With partition: only machines now on this boot interface."})
    state = fields.String(validate=validate.OneOf(("ready",)), metadata={
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


class MigrationSchema(Schema):
    id = fields.String()
    state = fields.String(validate=validate.OneOf(MIGRATION_STATES))
    boot_interface = fields.String()
    selector = fields.Dict()
    options = fields.Dict()
    total = fields.Integer()
    counts = fields.Dict(keys=fields.String(), values=fields.Integer(), metadata={
        "description": "Machines per step."})
    progress = fields.Float(metadata={"description": "Share of machines finished, 0..1."})
    reason = fields.String(allow_none=True)
    created_at = fields.String()
    started_at = fields.String(allow_none=True)
    finished_at = fields.String(allow_none=True)
    estimated_completion = fields.String(allow_none=True)


class MigrationListSchema(Schema):
    migrations = fields.List(fields.Nested(MigrationSchema))
    next_marker = fields.String(allow_none=True)


class MigrationListQuerySchema(StrictSchema):
    state = fields.String(validate=validate.OneOf(MIGRATION_STATES))
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    marker = fields.String(validate=validate.Length(max=64))


class EvidenceSchema(Schema):
    id = fields.Integer()
    interface = fields.String(metadata={"description": "The boot interface fetched through."})
    kind = fields.String(metadata={"description": "fetch (of a per-machine artifact) or "
                                                  "report (a boot report)."})
    path = fields.String()
    client_address = fields.String(allow_none=True)
    created_at = fields.String()


class EvidenceListSchema(Schema):
    evidence = fields.List(fields.Nested(EvidenceSchema))
    next_cursor = fields.Integer(metadata={
        "description": "Pass as since= to get the evidence recorded after this."})


class MigrationMachineSchema(Schema):
    machine_id = fields.String()
    position = fields.Integer()
    canary = fields.Boolean()
    source_boot_interface = fields.String()
    state = fields.String(validate=validate.OneOf(MACHINE_STEPS))
    attempt = fields.Integer()
    last_error = fields.String(allow_none=True)
    started_at = fields.String(allow_none=True)
    activated_at = fields.String(allow_none=True)
    finished_at = fields.String(allow_none=True)
    evidence = fields.Nested(EvidenceSchema, allow_none=True)
    seconds_to_evidence = fields.Float(allow_none=True)


class MigrationMachineListSchema(Schema):
    machines = fields.List(fields.Nested(MigrationMachineSchema))
    next_marker = fields.Integer(allow_none=True, metadata={
        "description": "Position of the last machine of this page."})


class MigrationMachineQuerySchema(StrictSchema):
    state = fields.String(validate=validate.OneOf(MACHINE_STEPS))
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    marker = fields.Integer(validate=validate.Range(min=-1, max=MAX_CURSOR))


class FeedQuerySchema(StrictSchema):
    since = fields.Integer(validate=validate.Range(min=0, max=MAX_CURSOR), load_default=0,
                           metadata={
        "description": "Cursor: the next_cursor of the previous answer (0: from the start)."})
    limit = fields.Integer(validate=validate.Range(min=1, max=MAX_PAGE_SIZE))
    machine_id = fields.String(validate=validate.Length(max=64))
    migration_id = fields.String(validate=validate.Length(max=64))
