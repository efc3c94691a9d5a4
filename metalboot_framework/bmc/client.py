"""A Redfish client for one system behind one BMC: boot override and HTTP boot URI.

Power control is in :mod:`.power`, virtual media in :mod:`.media`; both work on
a :class:`BmcClient`. Every call goes through the cached connection of the BMC,
the retry policy, and the error translation that names BMC, system and the
Redfish property or action.
"""

import dataclasses
import logging
import threading
import time
from typing import Any, Mapping, Optional, Sequence

import sushy
from sushy.resources import base as sushy_base

from metalboot_framework import metrics
from metalboot_framework.bmc import bios as bios_mod
from metalboot_framework.bmc import connection as connection_mod
from metalboot_framework.bmc import quirks as quirks_mod
from metalboot_framework.bmc import redact
from metalboot_framework.bmc import retry as retry_mod
from metalboot_framework.exceptions import BmcUnsupported, InvalidInput

LOG = logging.getLogger(__name__)

#: Machine property naming the system on a BMC that has several.
SYSTEM_ID_PROPERTY = "redfish_system_id"

# (url, system path) -> (target, mode) of an override that had to be set Once
# because the BMC refuses Continuous: re-applied before each reset.
_REAPPLY = {}
_REAPPLY_LOCK = threading.Lock()

#: Seconds for which a ComputerSystem document read by a client stands in for a
#: new read of its Boot section (before a PATCH) or its PowerState (before a
#: reset), as long as the client has not changed them since.
REUSE_SECONDS = 10.0

#: What a reuse of the system document needs to be current (see system_json).
BOOT, POWER, LINKS = "boot", "power", "links"


@dataclasses.dataclass(frozen=True)
class Document:
    """One Redfish resource as read: its JSON, the response headers, when."""

    path: str
    data: Any
    headers: Mapping
    read_at: float

    @property
    def etag(self):
        """The ETag for an If-Match: the header, else the body's @odata.etag
        (Lenovo XCC gives only that)."""
        body = self.data.get("@odata.etag") if isinstance(self.data, dict) else None
        return self.headers.get("ETag") or body


class _PrefetchedReader(sushy_base.JsonDataReader):
    """Gives a sushy resource the document already read, then reads anew
    (sushy reads again for refresh() and for headers, e.g. the ETag or Allow
    of a PATCH-style virtual media insert)."""

    def __init__(self, document):
        self._document = document

    def get_data(self):
        document, self._document = self._document, None
        if document is None:
            return super().get_data()
        return sushy_base.FieldData(200, document.headers, document.data)


@dataclasses.dataclass(frozen=True)
class BootState:
    """What a system's Boot section (and BIOS, for the URI quirk) says now."""

    target: Optional[str]
    enabled: Optional[str]
    mode: Optional[str]
    http_boot_uri: Optional[str]
    #: Where the URI lives: "Boot.HttpBootUri", "Bios.<attribute>", or None
    #: when the system offers neither.
    http_boot_uri_location: Optional[str]
    #: The URI the next boot will use (a pending BIOS value, else the current).
    http_boot_uri_next: Optional[str]
    allowed_targets: Optional[Sequence[str]]
    power_state: Optional[str]
    manufacturer: Optional[str]
    model: Optional[str]
    quirks: quirks_mod.Quirks
    #: The Boot section staged in the system's settings object (applied at
    #: the next reset: iDRAC10), when read (``boot_state(pending_boot=True)``);
    #: {} where nothing is staged or the system has no settings object.
    pending_boot: Mapping = dataclasses.field(default_factory=dict)
    #: Where that Boot is staged (the settings object's path), or None.
    pending_boot_path: Optional[str] = None

    @property
    def pending_override(self):
        """(target, enabled) of an override staged for the next reset, or None."""
        enabled = self.pending_boot.get("BootSourceOverrideEnabled")
        if enabled in (None, "Disabled"):
            return None
        return self.pending_boot.get("BootSourceOverrideTarget", self.target), enabled


class BmcClient:
    """One system on one BMC.

    ``system_id`` is the system's ``Id`` or ``@odata.id``; without it the BMC
    must have exactly one system.
    """

    def __init__(self, conf, bmc, system_id=None, cache=None, policy=None):
        self.conf = conf
        self.address = bmc.address
        self.url = connection_mod.base_url(bmc.address)
        self.username = bmc.username
        self._password = bmc.password
        self.verify = bmc.verify_tls
        self.system_id = system_id
        self.cache = cache or connection_mod.CACHE
        if cache is None:
            self.cache.ttl = conf.bmc.connection_cache_ttl
            self.cache.max_size = conf.bmc.connection_cache_size
            self.cache.max_requests = conf.bmc.max_requests_per_bmc
        self.policy = policy or retry_mod.Policy.from_conf(conf)
        self._path = None
        self._quirks = None
        # The last ComputerSystem document this client read, and what it has
        # changed since (BOOT after a PATCH); dropped after a reset.
        self._system_doc = None
        self._changed = set()
        # Manager documents read by this client ({path: data}): its firmware
        # version and VirtualMedia link do not change within one step.
        self._managers = {}
        redact.register_secret(self._password)

    def __repr__(self):
        return f"<BmcClient {self.url} system={self.system_label}>"

    def _remembered_quirks(self):
        """The quirks the BMC's connection learnt before, without a request."""
        if self._quirks is None:
            conn = self.cache.peek(self.url, self.username, self._password, self.verify)
            path = self._path or self.system_path_hint() or (
                conn and conn.facts.get((None, "system path")))
            if conn is not None and path:
                self._quirks = conn.facts.get((path, "quirks"))
        return self._quirks or self.cache.recall(self.url, "quirks")

    @property
    def vendor(self):
        """The vendor as the quirk table names it, once known."""
        quirks = self._remembered_quirks()
        return quirks.vendor if quirks is not None and quirks.name != "generic" else None

    def service_root_vendor(self):
        """Vendor and product as the service root gives them (Redfish
        ServiceRoot Vendor and Product, else the name of its Oem section),
        read without credentials (DSP0266 serves the service root to anyone):
        what names the BMC in a refusal of our credentials. None if it says
        nothing or cannot be read."""
        root = connection_mod.read_service_root(
            self.url, self.verify, timeout=min(self.conf.bmc.read_timeout, 5.0))
        if not root:
            return None
        named = " ".join(str(root[k]) for k in ("Vendor", "Product") if root.get(k))
        oem = [k for k in (root.get("Oem") or {}) if isinstance(k, str)]
        return named or (oem[0] if len(oem) == 1 else None)

    @property
    def where(self):
        """``BMC <address> (<vendor>), system <path>``: how messages name it."""
        vendor = self.vendor
        return f"BMC {self.address}{f' ({vendor})' if vendor else ''}, system " \
               f"{self.system_label}"

    @property
    def system_label(self):
        return self._path or self.system_path_hint() or \
            self.cache.recall(self.url, "system path") or "(default)"

    # -- plumbing -------------------------------------------------------------
    def connection(self):
        return self.cache.get(self.url, self.username, self._password, self.verify,
                              connect_timeout=self.conf.bmc.connect_timeout,
                              read_timeout=self.conf.bmc.read_timeout)

    def fact(self, conn, name):
        """What the connection learnt about this system before (see Connection.facts)."""
        return conn.facts.get((self.system_path(conn), name))

    def learn(self, conn, name, value):
        conn.facts[(self.system_path(conn), name)] = value

    def run(self, operation, fn, idempotent=True):
        """Call ``fn(connection)`` with retries; raise a BmcError naming ``operation``.

        ``idempotent=False`` (a reset, a media insert): see retry.Policy.run; the
        caller handles :class:`~metalboot_framework.bmc.retry.OutcomeUnknown`.
        """
        attempts = [0]

        def attempt():
            attempts[0] += 1
            with metrics.bmc_call(operation):
                conn = self.connection()
                with conn.slots:
                    return fn(conn)

        def on_transient(exc):
            if isinstance(exc, sushy.exceptions.ConnectionError):
                self.cache.invalidate(self.url, self.username)

        try:
            return self.policy.run(
                attempt, on_transient=on_transient, idempotent=idempotent,
                describe=lambda: f"BMC {self.address}, system {self.system_label}: {operation}")
        except retry_mod.OutcomeUnknown:
            raise  # the caller reads the BMC's state and decides
        except Exception as exc:
            vendor = self.vendor
            if isinstance(exc, sushy.exceptions.AccessError):
                self.cache.invalidate(self.url, self.username)
                vendor = vendor or self.service_root_vendor()
            error = retry_mod.translate(exc, address=self.address, system=self.system_label,
                                        operation=operation, username=self.username,
                                        password=self._password, attempts=attempts[0],
                                        vendor=vendor,
                                        timeouts=(self.conf.bmc.connect_timeout,
                                                  self.conf.bmc.read_timeout))
            if error is exc:
                raise
            raise error from None

    def system_path(self, conn):
        if self._path:
            return self._path
        if self.system_id:
            self._path = self.system_path_hint()
        else:
            path = conn.facts.get((None, "system path"))
            if path is None:
                # like sushy's get_system() without reading the system (twice)
                members = conn.root.get_system_collection().members_identities
                if len(members) != 1:
                    raise sushy.exceptions.UnknownDefaultError(
                        entity="ComputerSystem", error="System count is not exactly one")
                path = conn.facts[(None, "system path")] = members[0]
                self.cache.remember(self.url, "system path", path)
            self._path = path
        return self._path

    def read(self, conn, path):
        """GET ``path``: a :class:`Document`."""
        response = conn.connector.get(path)
        return Document(path, response.json(), response.headers, time.monotonic())

    def get_json(self, conn, path):
        document = self.read(conn, path)
        return document.data, document.etag

    def recent_system(self, need):
        """The system document read last, if it may stand in for a new read of
        what ``need`` names: LINKS (links, actions, manufacturer: any age), BOOT
        or POWER (read within REUSE_SECONDS, not changed by this client since)."""
        doc = self._system_doc
        if doc is None or need in self._changed:
            return None
        if need != LINKS and time.monotonic() - doc.read_at > REUSE_SECONDS:
            return None
        return doc

    def changed(self, what):
        """This client changed the system's Boot (BOOT) or power (POWER)."""
        if what == POWER:
            self._system_doc = None
        self._changed.add(what)

    def system_document(self, conn, reuse=None):
        """The ComputerSystem as a :class:`Document`: read anew, or with ``reuse``
        (BOOT, POWER, LINKS) the one read last if :meth:`recent_system` allows."""
        doc = self.recent_system(reuse) if reuse else None
        if doc is None:
            doc = self.read(conn, self.system_path(conn))
            self._system_doc, self._changed = doc, set()
        if self._quirks is None:
            self._quirks = self.fact(conn, "quirks")
            if self._quirks is None:
                self._quirks = self._find_quirks(conn, doc.data)
                self.learn(conn, "quirks", self._quirks)
                self.cache.remember(self.url, "quirks", self._quirks)
        return doc

    def system_json(self, conn, reuse=None):
        doc = self.system_document(conn, reuse)
        return doc.data, doc.etag

    def _find_quirks(self, conn, data):
        manufacturer, model = data.get("Manufacturer"), data.get("Model")
        if not manufacturer:
            managers = (data.get("Links") or {}).get("ManagedBy") or []
            if managers and managers[0].get("@odata.id"):
                try:
                    manager = self.manager_json(conn, managers[0]["@odata.id"])
                    manufacturer, model = manager.get("Manufacturer"), manager.get("Model")
                except sushy.exceptions.SushyError as exc:
                    LOG.debug("BMC %s: cannot read manager for quirks: %s", self.address,
                              redact.scrub(exc))
        found = quirks_mod.quirks_for(manufacturer, model)
        if found is not quirks_mod.GENERIC:
            LOG.debug("BMC %s system %s: vendor quirks %s", self.address, self.system_label,
                      found.name)
        return found

    def quirks(self, operation="read ComputerSystem (Manufacturer, Model)"):
        """The vendor quirks of this BMC (read once per connection to the BMC)."""
        self._remembered_quirks()
        if self._quirks is None:
            self.run(operation, lambda conn: self.system_json(conn, reuse=LINKS))
        return self._quirks

    # -- boot override ----------------------------------------------------------
    def manager(self):
        """The first manager of the system (Manager document), or {}."""
        def read(conn):
            system, _ = self.system_json(conn, reuse=LINKS)
            managers = (system.get("Links") or {}).get("ManagedBy") or []
            manager = self.manager_json(conn, managers[0]["@odata.id"]) if managers else {}
            # the model does not change while the connection lives (see remembered)
            self.learn(conn, "manager model", manager.get("Model"))
            return manager
        return self.run("read Manager (FirmwareVersion)", read)

    def remembered(self, name):
        """A fact the BMC's live connection learnt about this system (see
        Connection.facts), without a request; None if there is none."""
        conn = self.cache.peek(self.url, self.username, self._password, self.verify)
        path = self._path or self.system_path_hint() or (
            conn and conn.facts.get((None, "system path")))
        return conn.facts.get((path, name)) if conn is not None and path else None

    def manager_json(self, conn, path):
        """The Manager at ``path``, read once by this client."""
        if path not in self._managers:
            self._managers[path] = self.get_json(conn, path)[0]
        return self._managers[path]

    def quirks_known(self):
        """The quirks, read by an earlier call of this client or remembered by
        the BMC's connection (GENERIC if none)."""
        return self._remembered_quirks() or quirks_mod.GENERIC

    def settings_path(self, conn, system):
        """The system's settings object (DSP0266 "Settings") that takes its Boot
        changes, or None (none advertised, or it refused Boot before)."""
        settings = ((system.get("@Redfish.Settings") or {}).get("SettingsObject") or {}) \
            .get("@odata.id")
        return settings if settings and not self.fact(conn, "boot via system") else None

    def read_pending_boot(self, conn, system):
        """(settings object Document or None, its Boot section)."""
        path = self.settings_path(conn, system)
        if path is None:
            return None, {}
        try:
            doc = self.read(conn, path)
        except sushy.exceptions.ResourceNotFoundError:
            return None, {}
        boot = doc.data.get("Boot") if isinstance(doc.data, dict) else None
        return doc, boot or {}

    def boot_state(self, http_boot_uri=False, pending=True, reuse=False, pending_boot=False):
        """Read the system's boot override and power state; with
        ``http_boot_uri``, also where the UEFI HTTP boot URI is kept and its
        value. Without it the BIOS is not read (two GETs saved on BMCs that keep
        the URI in BIOS attributes), and the URI fields are set only from
        ``Boot.HttpBootUri``. ``pending=False``: the BIOS's pending settings
        are not read (``http_boot_uri_next`` is then the current value).
        ``reuse``: the system as this client read it moments ago, if it has
        not changed its Boot since (see :meth:`recent_system`).
        ``pending_boot``: also the Boot staged in the system's settings object
        (one more GET where the system advertises one)."""
        def read(conn):
            system, _ = self.system_json(conn, reuse=BOOT if reuse else None)
            boot = system.get("Boot") or {}
            if http_boot_uri or "HttpBootUri" in boot:
                place = bios_mod.find(self, conn, system, read_pending=pending)
            else:
                place = bios_mod.UriPlace(None)
            staged, staged_path = {}, None
            if pending_boot:
                doc, staged = self.read_pending_boot(conn, system)
                staged_path = doc.path if doc is not None else None
            allowed = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
            return BootState(
                target=boot.get("BootSourceOverrideTarget"),
                enabled=boot.get("BootSourceOverrideEnabled"),
                mode=boot.get("BootSourceOverrideMode"),
                http_boot_uri=place.current, http_boot_uri_location=place.location,
                http_boot_uri_next=place.next,
                allowed_targets=tuple(allowed) if allowed is not None else None,
                power_state=system.get("PowerState"),
                manufacturer=system.get("Manufacturer"), model=system.get("Model"),
                quirks=self._quirks, pending_boot=staged, pending_boot_path=staged_path)
        return self.run("read Boot (BootSourceOverrideTarget, HttpBootUri)", read)

    def set_boot_override(self, target, enabled="Once", mode="UEFI", http_boot_uri=None,
                          on_bios_change=None, on_new_read=None):
        """Set the next boot's target (and UEFI HTTP boot URI).

        Follows the quirk table: full requests for AMI/ASRock, Enabled always
        sent for Supermicro, POST retries for HPE, the vendor's BIOS attribute
        where Boot.HttpBootUri is absent (Dell HttpDev1Uri, HPE UrlBootFile). A BMC that
        refuses ``Continuous`` gets ``Once``, re-applied before each reset by
        :func:`metalboot_framework.bmc.power.reset`.
        ``on_bios_change(previous)``: called before BIOS attributes are staged,
        with the value the next boot would have used of each one changed, so
        that the caller can record them (and put them back).
        ``on_new_read(boot)``: called with the system's Boot section of a read
        the caller has not seen (after a 412 or a retry), before it is
        overwritten: an override someone set meanwhile can be recorded too.
        """
        hooks = dict(on_bios_change=on_bios_change, on_new_read=on_new_read)
        if enabled == "Continuous":
            try:
                return self._set_boot_override(target, "Continuous", mode, http_boot_uri,
                                               **hooks)
            except ContinuousRefused:
                LOG.warning("BMC %s system %s refuses BootSourceOverrideEnabled=Continuous; "
                            "setting Once, re-applied before each reset", self.address,
                            self.system_label)
                self._set_boot_override(target, "Once", mode, http_boot_uri, **hooks)
                with _REAPPLY_LOCK:
                    _REAPPLY[(self.url, self._path)] = (target, mode, http_boot_uri)
                return "Once"
        return self._set_boot_override(target, enabled, mode, http_boot_uri, **hooks)

    def _set_boot_override(self, target, enabled, mode, http_boot_uri, on_bios_change=None,
                           on_new_read=None):
        operation = (f"PATCH Boot.BootSourceOverrideTarget={target}"
                     + (f", Boot.HttpBootUri={http_boot_uri}" if http_boot_uri else ""))
        # Read quirks first, so the retry policy knows about POST refusals.
        self.quirks(operation)
        seen = self._system_doc  # the read the caller decided on, if any

        def apply(conn, doc):
            system, etag = doc.data, doc.etag
            boot = system.get("Boot") or {}
            if on_new_read is not None and doc is not seen:
                on_new_read(boot)
            quirks = self._quirks
            allowed = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
            if allowed is not None and target not in allowed:
                raise BmcUnsupported(
                    f"BMC {self.address}, system {self.system_label}: "
                    f"Boot.BootSourceOverrideTarget {target} is not allowed "
                    f"(BootSourceOverrideTarget@Redfish.AllowableValues: "
                    f"{', '.join(allowed) or 'none'})", address=self.address,
                    system=self.system_label, operation="Boot.BootSourceOverrideTarget")
            allowed_enabled = boot.get("BootSourceOverrideEnabled@Redfish.AllowableValues")
            if enabled == "Continuous" and allowed_enabled is not None \
                    and "Continuous" not in allowed_enabled:
                raise ContinuousRefused()
            body = {"BootSourceOverrideTarget": target}
            if quirks.full_boot_request:
                body["BootSourceOverrideEnabled"] = enabled
                body["BootSourceOverrideMode"] = mode or boot.get("BootSourceOverrideMode") \
                    or "UEFI"
            else:
                if enabled and (quirks.always_send_enabled
                                or boot.get("BootSourceOverrideEnabled") != enabled):
                    body["BootSourceOverrideEnabled"] = enabled
                if mode and (quirks.resend_mode or boot.get("BootSourceOverrideMode") != mode):
                    # Supermicro drops back to Legacy unless the mode comes again
                    body["BootSourceOverrideMode"] = mode
            if target == "UefiHttp" and http_boot_uri:
                place = bios_mod.find(self, conn, system)
                if place.location == bios_mod.BOOT_URI:
                    body["HttpBootUri"] = http_boot_uri
                elif place.location:
                    change = bios_mod.uri_change(self, place, http_boot_uri)
                    if change:
                        if on_bios_change is not None:
                            on_bios_change({name: place.next_value(name) for name in change})
                        self.changed(BOOT)
                        bios_mod.stage(self, conn, place, change, system)
                else:
                    raise BmcUnsupported(
                        f"{self.where}: {quirks_mod.missing_uri_place(quirks)} to hold the "
                        f"UEFI HTTP boot URI",
                        address=self.address, system=self.system_label,
                        operation="Boot.HttpBootUri")
            try:
                self.changed(BOOT)
                self._patch_boot(conn, system, body, etag)
            except sushy.exceptions.BadRequestError as exc:
                text = f"{exc.detail} {exc.extended_info} {exc.related_properties}"
                if enabled == "Continuous" and ("BootSourceOverrideEnabled" in text
                                                or "Continuous" in text):
                    raise ContinuousRefused() from exc
                raise
            return enabled

        return self.run_on_system(operation, apply)

    def _patch_boot(self, conn, system, body, etag, settings_doc=None):
        """PATCH ``{"Boot": body}``: where the system advertises a
        @Redfish.Settings object, to that object, applied by the BMC at the
        next reset (iDRAC10 refuses Boot on the system as read-only; sushy
        writes Boot there too), and to the system itself if the object refuses
        Boot; else to the system. ``settings_doc``: that object as just read."""
        settings = self.settings_path(conn, system)
        if settings:
            try:
                document = settings_doc or self.read(conn, settings)
                return conn.connector.patch(settings, data={"Boot": body},
                                            etag=document.etag)
            except sushy.exceptions.BadRequestError as exc:
                text = f"{exc.code} {exc.detail} {exc.extended_info}"
                if not ("PropertyUnknown" in text or "PropertyNotWritable" in text
                        or "read only" in text or "read-only" in text):
                    raise
            self.learn(conn, "boot via system", True)
        return conn.connector.patch(self._path, data={"Boot": body}, etag=etag)

    def run_on_system(self, operation, apply):
        """:meth:`run` of ``apply(conn, system document)`` for a change of Boot.

        The first attempt takes the document of a recent read (see
        :meth:`recent_system`) instead of reading it again; retries read anew.
        A PATCH whose If-Match ETag is no longer current (412: someone changed
        the resource since the read) is never sent again without it: ``apply``
        runs again on what the BMC holds now, so that it decides anew what to
        write (or refuses) and sends the fresh ETag.
        """
        attempts = [0]

        def attempt(conn):
            attempts[0] += 1
            return retry_stale_etag(
                lambda fresh: apply(conn, self.system_document(
                    conn, BOOT if attempts[0] == 1 and not fresh else None)))

        return self.run(operation, attempt)

    def reapply_once_override(self):
        """Before a reset: re-apply an override that had to fall back to Once."""
        with _REAPPLY_LOCK:
            pending = _REAPPLY.get((self.url, self._path or self.system_path_hint()))
        if pending:
            target, mode, uri = pending
            self._set_boot_override(target, "Once", mode, uri)
            return True
        return False

    def system_path_hint(self):
        if self.system_id:
            return self.system_id if self.system_id.startswith("/") else \
                f"{connection_mod.ROOT_PREFIX}Systems/{self.system_id}"
        return None

    def clear_boot_override(self, only_targets=None, clear_http_boot_uri=True,
                            bios_before=None, restore=None):
        """Disable the boot override and clear the HTTP boot URI explicitly.

        ``only_targets``: leave an override alone whose target is not one of
        these (someone else's). ``bios_before``: where the URI is kept in BIOS
        attributes, the values to stage instead of an empty URI (those
        ``set_boot_override`` reported to ``on_bios_change``). ``restore``:
        the override as found before ours (``{"target", "enabled", "mode"}``),
        put back in the same PATCH unless someone else's is active now.
        Returns a list of what was cleared and restored.
        """
        operation = "PATCH Boot (clear BootSourceOverrideEnabled, HttpBootUri)"
        self.quirks(operation)

        def clear(conn, doc):
            cleared = []
            system, etag = doc.data, doc.etag
            quirks = self._quirks
            body = {}
            # what the next reset applies: the Boot staged in the settings
            # object (a reset that failed leaves it there) over the current one
            settings_doc, staged = self.read_pending_boot(conn, system)
            boot = dict(system.get("Boot") or {}, **staged)
            target = boot.get("BootSourceOverrideTarget")
            enabled = boot.get("BootSourceOverrideEnabled")
            ours = only_targets is None or target in only_targets
            active = enabled not in (None, "Disabled")
            if ours and active:
                body["BootSourceOverrideEnabled"] = "Disabled"
                if quirks.full_boot_request:
                    body["BootSourceOverrideTarget"] = target or "None"
                    body["BootSourceOverrideMode"] = boot.get("BootSourceOverrideMode") or "UEFI"
                cleared.append(f"BootSourceOverrideEnabled={enabled} (target {target}"
                               + (f", staged in {settings_doc.path})"
                                  if staged.get("BootSourceOverrideEnabled") else ")"))
            if restore and (ours or not active):
                body.update(_restore_body(boot, restore, cleared))
            if clear_http_boot_uri:
                place = bios_mod.find(self, conn, system)
                if place.location == bios_mod.BOOT_URI and place.current is not None:
                    body["HttpBootUri"] = None
                    cleared.append(f"HttpBootUri={place.current}")
                elif place.attribute and (place.next or place.current or bios_before):
                    change = bios_mod.restore_change(place, bios_before) if bios_before \
                        else bios_mod.uri_change(self, place, None)
                    if change:
                        self.changed(BOOT)
                        bios_mod.stage(self, conn, place, change, system)
                        cleared.append(
                            f"{place.location}={place.next or place.current}" + (
                                f" (staged as before: {', '.join(sorted(change))})"
                                if bios_before else ""))
            if body:
                self.changed(BOOT)
                self._patch_boot(conn, system, body, etag, settings_doc)
            return cleared

        result = self.run_on_system(operation, clear)
        with _REAPPLY_LOCK:
            _REAPPLY.pop((self.url, self._path), None)
        return result

    # -- sushy resources --------------------------------------------------------
    def sushy_resource(self, conn, cls, path, document=None):
        """A sushy resource of class ``cls`` at ``path``; from ``document`` (a
        :class:`Document` already read) instead of a GET when given."""
        kwargs = dict(redfish_version=conn.root.redfish_version,
                      registries=conn.root.lazy_registries, root=conn.root)
        if document is None:
            return cls(conn.connector, path, **kwargs)
        # sushy's ResourceBase takes a reader, but System.__init__ does not pass
        # one on (it adds nothing else to ResourceBase.__init__, nor does VirtualMedia)
        resource = cls.__new__(cls)
        sushy_base.ResourceBase.__init__(resource, conn.connector, path,
                                         reader=_PrefetchedReader(document), **kwargs)
        return resource

    def sushy_system(self, conn, reuse=None):
        """The sushy System; ``reuse`` (LINKS for its actions): see :meth:`system_document`."""
        from sushy.resources.system import system as system_mod
        doc = self.recent_system(reuse) if reuse else None
        return self.sushy_resource(conn, system_mod.System, self.system_path(conn), doc)


def _restore_body(boot, found, done):
    """The Boot properties that put back the override ``found`` (all three,
    as every vendor takes them), or {} where Boot has it already or no
    longer allows its target; appends what it restores to ``done``."""
    want = {"BootSourceOverrideTarget": found.get("target"),
            "BootSourceOverrideEnabled": found.get("enabled") or "Disabled",
            "BootSourceOverrideMode": found.get("mode") or boot.get("BootSourceOverrideMode")}
    allowed = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
    if not want["BootSourceOverrideTarget"] or (
            allowed is not None and want["BootSourceOverrideTarget"] not in allowed):
        return {}
    if all(boot.get(k) == v for k, v in want.items() if v is not None):
        return {}
    done.append("restored BootSourceOverride " + " ".join(
        str(want[k]) for k in ("BootSourceOverrideEnabled", "BootSourceOverrideTarget",
                               "BootSourceOverrideMode")))
    return {k: v for k, v in want.items() if v is not None}


#: How often a change is read and sent again when every PATCH meets a newer
#: ETag (a resource that someone else keeps changing).
STALE_ETAG_ATTEMPTS = 3


def retry_stale_etag(change):
    """``change(fresh)``, again with ``fresh=True`` after a 412: the caller
    reads the resource anew and decides again whether and what to write."""
    for attempt in range(STALE_ETAG_ATTEMPTS):
        try:
            return change(attempt > 0)
        except sushy.exceptions.HTTPError as exc:
            if not connection_mod.is_stale_etag(exc) or attempt + 1 == STALE_ETAG_ATTEMPTS:
                raise
            LOG.info("PATCH answered 412 (%s): the resource changed since it was read; "
                     "reading it again", redact.scrub(exc))


class ContinuousRefused(BmcUnsupported):
    """The BMC does not accept BootSourceOverrideEnabled=Continuous."""

    def __init__(self):
        super().__init__("BootSourceOverrideEnabled=Continuous refused",
                         operation="Boot.BootSourceOverrideEnabled")


def client_for_machine(conf, machine, cache=None):
    """A :class:`BmcClient` for a :class:`~metalboot_framework.task.MachineInfo`."""
    if not machine.bmc or not machine.bmc.address:
        raise InvalidInput(f"machine {machine.id} has no BMC address",
                           fields={"bmc.address": ["required"]})
    return BmcClient(conf, machine.bmc, machine.properties.get(SYSTEM_ID_PROPERTY),
                     cache=cache)


def client_for_task(task, cache=None):
    return client_for_machine(task.conf, task.machine, cache=cache)
