"""A mock BMC serving vendor Redfish JSON, and its fixtures (see conftest.py).

``MockRedfishBmc`` is a small in-process HTTP server (127.0.0.1, free port). It
is a mock: it stands in for vendor BMC firmware that cannot run here. It serves
either documents shaped like a vendor's (:func:`vendor_documents`, written
after DMTF's public mockups) or a vendor's real public payloads from
``tests/redfish_corpus`` (:func:`corpus_documents`, each file's source named in
its directory's ``SOURCES.json``), and behaves as :mod:`vendor_behaviour`
documents for that vendor. It counts every request by method and every reset,
and simulates what the firmware boots after each reset (``boots``).
"""
import base64
import collections
import copy
import hashlib
import http.server
import json
import os
import sys
import threading
import time

import pytest

from tests import redfish_conf as redfish_conf_mod

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

IPXE_EFI = os.environ.get("METALBOOT_TEST_IPXE_EFI", "/usr/lib/ipxe/ipxe.efi")
# how often serve_forever looks for a shutdown: stop() waits up to this long
# (http.server's 0.5 s, times three BMCs per conformance test, was most of it)
POLL = 0.02
SYSTEM = "/redfish/v1/Systems/1"
MANAGER = "/redfish/v1/Managers/1"


def vendor_documents(manufacturer, model="", http_boot_uri=True, bios_uri_attribute=None,
                     enabled_allowable=None, system_manufacturer=True):
    """Redfish documents of one system + manager, as a vendor's BMC returns them."""
    boot = {
        "BootSourceOverrideEnabled": "Disabled",
        "BootSourceOverrideTarget": "None",
        "BootSourceOverrideMode": "UEFI",
        "BootSourceOverrideTarget@Redfish.AllowableValues": [
            "None", "Pxe", "Cd", "Hdd", "BiosSetup", "UefiHttp", "UsbCd"],
    }
    if http_boot_uri:
        boot["HttpBootUri"] = None
    if enabled_allowable is not None:
        boot["BootSourceOverrideEnabled@Redfish.AllowableValues"] = enabled_allowable
    system = {
        "@odata.id": SYSTEM, "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
        "Id": "1", "Name": "System", "PowerState": "On", "Boot": boot,
        "Links": {"ManagedBy": [{"@odata.id": MANAGER}]},
        "Bios": {"@odata.id": SYSTEM + "/Bios"},
        "Actions": {"#ComputerSystem.Reset": {
            "target": SYSTEM + "/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart",
                                                  "GracefulShutdown"]}},
    }
    if system_manufacturer:
        system["Manufacturer"], system["Model"] = manufacturer, model
    attributes = {"BootMode": "Uefi"}
    if bios_uri_attribute:
        attributes[bios_uri_attribute] = ""
        attributes["HttpDev1EnDis"] = "Disabled"
    docs = {
        "/redfish/v1/": {"@odata.id": "/redfish/v1/", "Id": "RootService",
                         "RedfishVersion": "1.15.0",
                         "Systems": {"@odata.id": "/redfish/v1/Systems"},
                         "Managers": {"@odata.id": "/redfish/v1/Managers"}},
        "/redfish/v1/Systems": {"Members": [{"@odata.id": SYSTEM}],
                                "Members@odata.count": 1},
        SYSTEM: system,
        SYSTEM + "/Bios": {"@odata.id": SYSTEM + "/Bios", "Id": "Bios",
                           "Attributes": attributes,
                           "@Redfish.Settings": {"SettingsObject": {
                               "@odata.id": SYSTEM + "/Bios/Settings"}}},
        SYSTEM + "/Bios/Settings": {"@odata.id": SYSTEM + "/Bios/Settings",
                                    "Attributes": {}},
        MANAGER: {"@odata.id": MANAGER, "Id": "1", "Manufacturer": manufacturer,
                  "Model": model, "VirtualMedia": {"@odata.id": MANAGER + "/VirtualMedia"}},
        MANAGER + "/VirtualMedia": {"Members": [{"@odata.id": MANAGER + "/VirtualMedia/CD1"}]},
        MANAGER + "/VirtualMedia/CD1": {
            "@odata.id": MANAGER + "/VirtualMedia/CD1", "Id": "CD1", "Name": "Virtual CD",
            "MediaTypes": ["CD", "DVD"], "Image": None, "Inserted": False,
            "Actions": {
                "#VirtualMedia.InsertMedia": {
                    "target": MANAGER + "/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia"},
                "#VirtualMedia.EjectMedia": {
                    "target": MANAGER + "/VirtualMedia/CD1/Actions/VirtualMedia.EjectMedia"}}},
    }
    return docs


CORPUS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "redfish_corpus")


def corpus_documents(vendor):
    """The documents of ``tests/redfish_corpus/<vendor>``, keyed on their path,
    with the vendor profile's overlays applied (see vendor_behaviour)."""
    from vendor_behaviour import PROFILES
    folder = os.path.join(CORPUS, vendor)
    docs = {}
    for name in sorted(os.listdir(folder)):
        if name == "SOURCES.json":
            continue
        with open(os.path.join(folder, name)) as f:
            doc = json.load(f)
        docs[normalise(doc["@odata.id"])] = doc
    for path, patch, _source in PROFILES[vendor].overlays:
        merge(docs.setdefault(path, {"@odata.id": path}), copy.deepcopy(patch))
    return docs


def set_up_for_uefi(docs):
    """The change an operator makes before migrating a machine captured in
    Legacy mode: the firmware boots UEFI (Boot.BootSourceOverrideMode and the
    BIOS boot mode say so)."""
    system = docs[normalise(docs["/redfish/v1/Systems"]["Members"][0]["@odata.id"])]
    system["Boot"]["BootSourceOverrideMode"] = "UEFI"
    bios = docs.get(normalise((system.get("Bios") or {}).get("@odata.id") or "-"))
    if bios and "BootMode" in (bios.get("Attributes") or {}):
        bios["Attributes"]["BootMode"] = "Uefi"


def normalise(path):
    path = path.split("?")[0].rstrip("/") or "/"
    return "/redfish/v1/" if path == "/redfish/v1" else path


def is_bios_settings(path):
    """A BIOS settings (pending) object: Dell/DMTF ``Bios/Settings``, Lenovo
    ``Bios/Pending``, HPE iLO ``bios/settings`` (iLO paths are lower case)."""
    return path.lower().endswith(("/bios/settings", "/bios/pending"))


def merge(target, patch):
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


class Fault(Exception):
    """An answer the mock gives instead of the normal one."""

    def __init__(self, status, message_id, message):
        super().__init__(message)
        self.status, self.message_id, self.message = status, message_id, message


class MockRedfishBmc:
    """In-process mock BMC.

    ``log`` holds (method, path, body) of each request, ``counts`` the
    requests per method, ``resets`` the ResetType of each reset, ``boots``
    what the simulated firmware booted after each reset, ``jobs`` the config
    jobs created. Faults: ``statuses`` (forced statuses for the next
    requests), ``fail_rate`` (that share of requests answers 503), ``slow``
    ({(method, path suffix): seconds}: the request is processed, then
    answered that late), ``eject_conflict`` (EjectMedia answers 409 and keeps
    the media), ``busy`` (that many requests get the vendor's busy refusal),
    ``password`` (Basic auth checked when set), :meth:`kill` (dead BMC),
    ``refuse`` ({(method, path suffix): (status, MessageId, message)}: those
    requests always get that error answer), :meth:`when` (a change of the
    BMC's behaviour at a given request, e.g. dying in the middle of a step).
    ``faults`` holds (method, path, status, MessageId) of each error answer and
    (method, path, "late", None) of each answer given past ``slow``.
    """

    def __init__(self, documents, profile=None, password=None, seed=0):
        import random

        from vendor_behaviour import Profile
        self.profile = profile or Profile("synthetic")
        self.docs = copy.deepcopy(documents)
        self.system_path = self.docs["/redfish/v1/Systems"]["Members"][0]["@odata.id"]
        self.system_path = normalise(self.system_path)
        for doc in list(self.docs.values()):
            # a settings object the payload links to: the pending state, empty
            settings = ((doc.get("@Redfish.Settings") or {}).get("SettingsObject") or {}) \
                .get("@odata.id")
            if settings and normalise(settings) not in self.docs:
                self.docs[normalise(settings)] = {"@odata.id": settings, "Attributes": {}} \
                    if "Attributes" in doc else {"@odata.id": settings}
        self.log = []
        self.counts = collections.Counter()
        self.resets = []
        self.boots = []
        self.jobs = []
        self.post_refusals = 0          # HPE: 400 "in POST" for that many PATCHes
        self.refuse_continuous = False  # 400 on BootSourceOverrideEnabled=Continuous
        self.statuses = []              # forced statuses for the next requests
        self.delay = 0.0                # seconds each request takes
        self.slow = {}
        self.fail_rate = 0.0
        self.busy = 0
        self.eject_conflict = False
        self.eject_ignored = False      # EjectMedia answered 204, media kept
        # EjectMedia sets Inserted false but leaves Image: what
        # ansible-collections/community.general #6969 reports of a Supermicro
        self.eject_keeps_image = False
        self.if_matches = []            # (path, If-Match or None) of each PATCH
        self.refuse = {}
        self.faults = []
        self.triggers = []              # [method, path suffix, action] not yet run
        self.on_boot = None             # called (in a thread) with each boot's outcome
        self.password = password
        self.random = random.Random(seed)
        self.active = self.most_active = 0  # requests under way: now, at most
        self.lock = threading.Lock()
        self.pending_system = {}        # Boot changes staged in the settings object
        bmc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body=None, headers=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                # One request per connection, said explicitly, so that clients
                # never reuse a socket the mock is about to close.
                self.send_header("Connection", "close")
                self.close_connection = True
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:  # the client gave up (read timeout)
                    pass

            def error(self, status, message_id, message):
                self.reply(status, {"error": {"code": message_id, "message": message,
                                              "@Message.ExtendedInfo": [{
                                                  "MessageId": message_id,
                                                  "Message": message,
                                                  "Severity": "Warning"}]}})

            def handle_any(self):
                with bmc.lock:
                    bmc.active += 1
                    bmc.most_active = max(bmc.most_active, bmc.active)
                try:
                    if bmc.delay:
                        time.sleep(bmc.delay)
                    length = int(self.headers.get("Content-Length") or 0)
                    raw = self.rfile.read(length) if length else b""
                    body = json.loads(raw) if raw else None
                    path = normalise(self.path)
                    bmc.run_triggers(self.command, path)
                    with bmc.lock:
                        bmc.log.append((self.command, path, body))
                        bmc.counts[self.command] += 1
                        try:
                            status, answer, headers = bmc.answer(
                                self.command, path, body, self.headers, bool(raw))
                        except Fault as fault:
                            bmc.faults.append((self.command, path, fault.status,
                                               fault.message_id))
                            status, answer, headers = fault.status, {"error": {
                                "code": fault.message_id, "message": fault.message,
                                "@Message.ExtendedInfo": [{
                                    "MessageId": fault.message_id, "Message": fault.message,
                                    "Severity": "Warning"}]}}, {}
                    for (method, suffix), seconds in list(bmc.slow.items()):
                        if method == self.command and path.endswith(suffix):
                            with bmc.lock:
                                bmc.faults.append((self.command, path, "late", None))
                            time.sleep(seconds)
                finally:
                    # ended before the answer leaves: a client that has it may
                    # send its next request before this thread runs again
                    with bmc.lock:
                        bmc.active -= 1
                self.reply(status, answer, headers)

            do_GET = do_PATCH = do_POST = handle_any

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": POLL},
                         daemon=True).start()

    # -- the BMC's behaviour -------------------------------------------------------
    def etag(self, path):
        doc = self.docs[path]
        digest = hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
        return f'"{digest}"'

    def answer(self, method, path, body, headers, has_body):
        """(status, body, headers) for one request; may raise :class:`Fault`."""
        # DSP0266: the service root (and /redfish) answers without authentication
        if self.password is not None and not (method == "GET" and path == "/redfish/v1/"):
            auth = headers.get("Authorization") or ""
            expected = "Basic " + base64.b64encode(
                f"root:{self.password}".encode()).decode()
            if auth != expected:
                raise Fault(401, "Base.1.8.NoValidSession", "Invalid username or password")
        for (refused, suffix), fault in self.refuse.items():
            if refused == method and path.endswith(suffix):
                raise Fault(*fault)
        forced = self.statuses.pop(0) if self.statuses else None
        if forced:
            raise Fault(forced, "Base.1.0.GeneralError", "forced")
        if self.fail_rate and self.random.random() < self.fail_rate:
            raise Fault(503, "Base.1.8.ServiceTemporarilyUnavailable", "random 503")
        if self.busy and method != "GET":
            self.busy -= 1
            raise Fault(*self.profile.busy)
        if method == "GET":
            doc = self.docs.get(path)
            if doc is None:
                raise Fault(404, "Base.1.0.ResourceMissingAtURI", path)
            doc = copy.deepcopy(doc)
            out_headers = {}
            if self.profile.etag_in in ("body", "both"):
                doc["@odata.etag"] = self.etag(path)
            else:
                doc.pop("@odata.etag", None)
            if self.profile.etag_in in ("header", "both"):
                out_headers["ETag"] = self.etag(path)
            if self.profile.media_patch and "MediaTypes" in doc:
                out_headers["Allow"] = "GET, PATCH"
            return 200, doc, out_headers
        if method == "PATCH":
            return self.patch(path, body or {}, headers)
        if method == "POST":
            return self.post(path, body, has_body)
        raise Fault(405, "Base.1.0.GeneralError", "not supported")

    def check_if_match(self, path, headers):
        given = headers.get("If-Match")
        self.if_matches.append((path, given))
        if given is None:
            if self.profile.if_match_required:
                raise Fault(428, "Base.1.8.PreconditionRequired",
                            "A precondition header (If-Match) is required.")
            return
        current = self.etag(path)
        if given.removeprefix("W/") != current and given != "*":
            raise Fault(412, "Base.1.8.PreconditionFailed", "The ETag does not match.")

    def patch(self, path, body, headers):
        if path not in self.docs:
            raise Fault(404, "Base.1.0.ResourceMissingAtURI", path)
        self.check_if_match(path, headers)
        system = self.docs[self.system_path]
        settings_path = normalise(((system.get("@Redfish.Settings") or {}).get(
            "SettingsObject") or {}).get("@odata.id") or "-")
        if path == self.system_path:
            boot = body.get("Boot") or {}
            if boot and self.profile.boot_in_settings_object:
                raise Fault(400, "Base.1.12.PropertyNotWritable",
                            "The property Boot is a read only property and cannot be "
                            "assigned a value.")
            if self.post_refusals:
                self.post_refusals -= 1
                raise Fault(400, "iLO.2.15.UnableToModifyDuringSystemPOST",
                            "The value for the property cannot be changed while "
                            "the server is in POST.")
            if self.refuse_continuous and boot.get("BootSourceOverrideEnabled") == "Continuous":
                raise Fault(400, "Base.1.8.PropertyValueNotInList",
                            "The value Continuous for the property "
                            "BootSourceOverrideEnabled is not in the list of "
                            "acceptable values.")
            self.check_boot(boot)
            merge(system, body)
            if self.profile.target_change_drops_mode and \
                    "BootSourceOverrideTarget" in boot and "BootSourceOverrideMode" not in boot:
                system["Boot"]["BootSourceOverrideMode"] = "Legacy"
            return 204, None, {}
        if path == settings_path:
            self.check_boot(body.get("Boot") or {})
            merge(self.pending_system, body)
            merge(self.docs[path], body)
            return 200, None, {}
        if "MediaTypes" in self.docs[path] and self.profile.media_patch:
            self.docs[path].update(Image=body.get("Image"),
                                   Inserted=bool(body.get("Inserted", body.get("Image"))))
            return 204, None, {}
        if is_bios_settings(path):
            apply_time = (body.pop("@Redfish.SettingsApplyTime", None) or {}).get("ApplyTime")
            merge(self.docs[path], body)
            if apply_time == "OnReset":
                self.docs[path]["@metalboot.mock.apply"] = "OnReset"
            return 200, None, {}
        merge(self.docs[path], body)
        return 204, None, {}

    def check_boot(self, boot):
        current = self.docs[self.system_path].get("Boot") or {}
        allowed = current.get("BootSourceOverrideTarget@Redfish.AllowableValues")
        if "HttpBootUri" in boot and "HttpBootUri" not in current:
            raise Fault(400, "Base.1.8.PropertyUnknown", "HttpBootUri")
        if allowed is not None and boot.get("BootSourceOverrideTarget") not in (None, *allowed):
            raise Fault(400, "Base.1.8.PropertyValueNotInList", "BootSourceOverrideTarget")

    def post(self, path, body, has_body):
        if not has_body and self.profile.empty_post_415:
            raise Fault(415, "Base.1.8.UnsupportedMediaType",
                        "The request body is missing or not JSON.")
        if path.endswith("ComputerSystem.Reset"):
            return self.reset((body or {}).get("ResetType"))
        if path.endswith("/Jobs"):
            target = normalise((body or {}).get("TargetSettingsURI") or "")
            if target not in self.docs:
                raise Fault(400, "IDRAC.2.8.SYS011", "TargetSettingsURI is invalid.")
            job = f"JID_{len(self.jobs) + 1:012d}"
            self.jobs.append({"Id": job, "TargetSettingsURI": target,
                              "JobState": "Scheduled"})
            self.docs[path + "/" + job] = {"@odata.id": path + "/" + job, "Id": job,
                                          "JobState": "Scheduled", "Message":
                                          "Task successfully scheduled."}
            return 200, None, {"Location": path + "/" + job}
        device_path = path.split("/Actions")[0]
        device = self.docs.get(device_path)
        if device is None or "MediaTypes" not in device:
            raise Fault(404, "Base.1.0.ResourceMissingAtURI", path)
        if path.endswith("VirtualMedia.InsertMedia"):
            if "#VirtualMedia.InsertMedia" not in (device.get("Actions") or {}):
                raise Fault(405, "Base.1.8.ActionNotSupported", "InsertMedia")
            slots = self.profile.insert_slots
            if slots is not None and device.get("Id") not in slots:
                raise Fault(400, "IDRAC.2.8.VRM0021",
                            f"Virtual media slot {device.get('Id')} cannot be used; use "
                            f"{', '.join(slots)}.")
            refused = [name for name in self.profile.insert_refuses if name in (body or {})]
            if refused:
                raise Fault(400, "Base.1.4.PropertyUnknown",
                            f"The property {refused[0]} is not in the list of valid "
                            f"properties for the resource.")
            if device.get("Inserted"):
                raise Fault(409, "Base.1.8.ResourceInUse", "media already inserted")
            image = (body or {}).get("Image")
            device.update(Image=image, Inserted=True)
            # DSP2046 VirtualMedia: where the device shows them
            if "ImageName" in device:
                device["ImageName"] = (image or "").rstrip("/").rpartition("/")[2] or None
            if "ConnectedVia" in device:
                device["ConnectedVia"] = "URI"
            return 204, None, {}
        if path.endswith("VirtualMedia.EjectMedia"):
            if "#VirtualMedia.EjectMedia" not in (device.get("Actions") or {}):
                raise Fault(405, "Base.1.8.ActionNotSupported", "EjectMedia")
            if self.eject_conflict:
                raise Fault(409, "Base.1.8.ResourceInUse",
                            "The media cannot be ejected: it is in use.")
            if self.eject_ignored:
                return 204, None, {}
            device.update(Inserted=False)
            if not self.eject_keeps_image:
                device["Image"] = None
            if "ImageName" in device and not self.profile.eject_keeps_image_name:
                device["ImageName"] = None
            if "ConnectedVia" in device:
                device["ConnectedVia"] = "NotConnected"
            return 204, None, {}
        raise Fault(405, "Base.1.0.GeneralError", "not supported")

    def reset(self, kind):
        system = self.docs[self.system_path]
        self.resets.append(kind)
        if kind in ("ForceOff", "GracefulShutdown"):
            system["PowerState"] = "Off"
            return 204, None, {}
        system["PowerState"] = "On"
        self.apply_pending()
        outcome = self.firmware_boot()
        self.boots.append(outcome)
        if self.on_boot is not None:  # e.g. fetch the URL, as the firmware would
            threading.Thread(target=self.on_boot, args=(outcome,), daemon=True).start()
        return 204, None, {}

    def apply_pending(self):
        """At a reset: the pending BIOS settings and settings-object Boot apply,
        where the vendor's rule lets them (see Profile.bios_apply)."""
        if self.pending_system:
            merge(self.docs[self.system_path], self.pending_system)
            self.pending_system = {}
            # applied: the settings object no longer holds it (as with BIOS below)
            settings = normalise(((self.docs[self.system_path].get("@Redfish.Settings")
                                   or {}).get("SettingsObject") or {}).get("@odata.id") or "-")
            self.docs.get(settings, {}).pop("Boot", None)
        for path, doc in list(self.docs.items()):
            if not is_bios_settings(path):
                continue
            attrs = doc.get("Attributes") or {}
            if not attrs:
                continue
            applies = self.profile.bios_apply == "reset" or \
                doc.get("@metalboot.mock.apply") == "OnReset" or any(
                    job["TargetSettingsURI"] == path and job["JobState"] == "Scheduled"
                    for job in self.jobs)
            if applies:
                bios = self.docs[path.rsplit("/", 1)[0]]
                merge(bios.setdefault("Attributes", {}), attrs)
                doc["Attributes"] = {}
                doc.pop("@metalboot.mock.apply", None)
                for job in self.jobs:
                    if job["TargetSettingsURI"] == path:
                        job["JobState"] = "Completed"

    def firmware_boot(self):
        """What UEFI firmware boots now: the URL it fetches or the media it
        starts, from the override and the *current* BIOS attributes."""
        system = self.docs[self.system_path]
        boot = system.get("Boot") or {}
        enabled, target = boot.get("BootSourceOverrideEnabled"), \
            boot.get("BootSourceOverrideTarget")
        outcome = {"target": None, "url": None, "media": None,
                   "mode": boot.get("BootSourceOverrideMode")}
        if enabled in ("Once", "Continuous") and target not in (None, "None"):
            outcome["target"] = target
            if outcome["mode"] == "Legacy":
                pass  # a Legacy boot starts neither a UEFI HTTP URL nor a UEFI-only ISO
            elif target == "UefiHttp":
                bios = self.docs.get(normalise((system.get("Bios") or {}).get(
                    "@odata.id") or "-"), {}).get("Attributes") or {}
                if boot.get("HttpBootUri"):
                    outcome["url"] = boot["HttpBootUri"]
                elif bios.get("HttpDev1EnDis") == "Enabled" and bios.get("HttpDev1Uri"):
                    outcome["url"] = bios["HttpDev1Uri"]
                elif bios.get("UrlBootFile"):
                    outcome["url"] = bios["UrlBootFile"]
            elif target in self.profile.cd_boot_targets:
                for doc in self.docs.values():
                    if set(doc.get("MediaTypes") or ()) & {"CD", "DVD"} and doc.get("Inserted"):
                        outcome["media"] = doc.get("Image")
                        break
            if enabled == "Once":
                boot["BootSourceOverrideEnabled"] = "Disabled"
        return outcome

    # -- test helpers --------------------------------------------------------------
    def when(self, method, suffix, action):
        """Run ``action(self)`` once, when the first ``method`` request to a path
        ending in ``suffix`` arrives, before it is answered."""
        self.triggers.append([method, suffix, action])

    def run_triggers(self, method, path):
        with self.lock:
            due = [t for t in self.triggers if t[0] == method and path.endswith(t[1])]
            self.triggers = [t for t in self.triggers if t not in due]
        for _method, _suffix, action in due:
            action(self)

    def kill(self):
        """A dead BMC: nothing listens on its port any more."""
        self.stop()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def requests(self, method, path=None):
        path = self.system_path if path is None else path
        return [body for m, p, body in self.log if m == method and p == path]

    def device(self, device_id):
        for doc in self.docs.values():
            if "MediaTypes" in doc and doc.get("Id") == device_id:
                return doc
        raise KeyError(device_id)

    @property
    def boot(self):
        return self.docs[self.system_path]["Boot"]

    def next_boot(self):
        """What the next boot uses: BIOS attributes and Boot, pending over
        current, and each CD/DVD device's (Image, Inserted)."""
        bios = dict(self.bios_attributes)
        for path, doc in self.docs.items():
            if is_bios_settings(path):
                bios.update(doc.get("Attributes") or {})
        system = self.docs[self.system_path]
        boot = dict(system.get("Boot") or {})
        settings = normalise(((system.get("@Redfish.Settings") or {}).get("SettingsObject")
                              or {}).get("@odata.id") or "-")
        boot.update((self.docs.get(settings) or {}).get("Boot") or {})
        media = {doc.get("Id"): (doc.get("Image"), bool(doc.get("Inserted")))
                 for doc in self.docs.values()
                 if {"CD", "DVD"} & set(doc.get("MediaTypes") or ())}
        return {"bios": bios, "boot": boot, "media": media}

    @property
    def bios_attributes(self):
        system = self.docs[self.system_path]
        bios = self.docs.get(normalise((system.get("Bios") or {}).get("@odata.id") or "-"))
        return bios.setdefault("Attributes", {}) if bios is not None else {}


@pytest.fixture
def mock_redfish_bmc():
    """Factory: mock_redfish_bmc(manufacturer, model='', **vendor_documents options)."""
    started = []

    def start(manufacturer, model="", **kwargs):
        bmc_ = MockRedfishBmc(vendor_documents(manufacturer, model, **kwargs))
        started.append(bmc_)
        return bmc_

    yield start
    for bmc_ in started:
        bmc_.stop()


@pytest.fixture
def vendor_bmc():
    """Factory: vendor_bmc(corpus name, **MockRedfishBmc options): a mock BMC
    serving that vendor's real payloads with its documented behaviour."""
    from vendor_behaviour import PROFILES
    started = []

    def start(vendor, uefi=False, **kwargs):
        docs = corpus_documents(vendor)
        if uefi:
            set_up_for_uefi(docs)
        bmc_ = MockRedfishBmc(docs, PROFILES[vendor], **kwargs)
        started.append(bmc_)
        return bmc_

    yield start
    for bmc_ in started:
        try:
            bmc_.stop()
        except OSError:
            pass


# Short waits between attempts; the timeouts of an answer and of a power change
# are those of a loaded test host (2 s made a slow answer a retried PATCH),
# and tests of a timeout set their own.
FAST_BMC = dict(connect_timeout=1.0, read_timeout=10.0, retry_attempts=3, retry_interval=0.01,
                retry_max_interval=0.05, power_poll_interval=0.01, power_timeout=10.0,
                post_retry_interval=0.02, post_retry_timeout=2.0)


def make_conf(state_path, public_url="http://[fd00:b007::1]:6480", **bmc_overrides):
    return redfish_conf_mod.make_conf(state_path, public_url, IPXE_EFI, FAST_BMC, **bmc_overrides)


_fresh_bmc_connection_cache = redfish_conf_mod.fresh_bmc_connection_cache
