"""A mock BMC serving vendor-like Redfish JSON, and its fixtures (see conftest.py).

``mock_redfish_bmc`` is a small in-process HTTP server (127.0.0.1, free port)
holding Redfish documents shaped like those AMI, Supermicro, HPE iLO, Dell
iDRAC and Lenovo XCC return (written after DMTF's public mockups and vendor
docs, trimmed to what metalboot reads). It applies PATCHes and resets to its
documents, logs every request, and can refuse changes the way those BMCs do.
"""

import copy
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


def merge(target, patch):
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


class MockRedfishBmc:
    """In-process mock BMC; ``log`` holds (method, path, body) of each request."""

    def __init__(self, documents):
        self.docs = copy.deepcopy(documents)
        self.log = []
        self.post_refusals = 0          # HPE: 400 "in POST" for that many PATCHes
        self.refuse_continuous = False  # 400 on BootSourceOverrideEnabled=Continuous
        self.statuses = []              # forced statuses for the next requests
        self.delay = 0.0                # seconds each request takes
        self.active = self.most_active = 0  # requests under way: now, at most
        self.lock = threading.Lock()
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
                self.wfile.write(data)

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
                    self.answer()
                finally:
                    with bmc.lock:
                        bmc.active -= 1

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                path = self.path.rstrip("/") or "/"
                if path == "/redfish/v1":
                    path = "/redfish/v1/"
                with bmc.lock:
                    bmc.log.append((self.command, path, body))
                    forced = bmc.statuses.pop(0) if bmc.statuses else None
                    if forced:
                        return self.error(forced, "Base.1.0.GeneralError", "forced")
                    if self.command == "GET":
                        doc = bmc.docs.get(path)
                        if doc is None:
                            return self.error(404, "Base.1.0.ResourceMissingAtURI", path)
                        return self.reply(200, doc, {"ETag": f'W/"{len(bmc.log)}"'})
                    if self.command == "PATCH":
                        if path == SYSTEM:
                            boot = (body or {}).get("Boot") or {}
                            if bmc.post_refusals:
                                bmc.post_refusals -= 1
                                return self.error(
                                    400, "iLO.2.15.UnableToModifyDuringSystemPOST",
                                    "The value for the property cannot be changed while "
                                    "the server is in POST.")
                            if bmc.refuse_continuous and \
                                    boot.get("BootSourceOverrideEnabled") == "Continuous":
                                return self.error(
                                    400, "Base.1.8.PropertyValueNotInList",
                                    "The value Continuous for the property "
                                    "BootSourceOverrideEnabled is not in the list of "
                                    "acceptable values.")
                            allowed = bmc.docs[SYSTEM]["Boot"].get(
                                "BootSourceOverrideTarget@Redfish.AllowableValues")
                            if "HttpBootUri" in boot and \
                                    "HttpBootUri" not in bmc.docs[SYSTEM]["Boot"]:
                                return self.error(400, "Base.1.8.PropertyUnknown",
                                                  "HttpBootUri")
                            if boot.get("BootSourceOverrideTarget") not in (None, *allowed):
                                return self.error(400, "Base.1.8.PropertyValueNotInList",
                                                  "BootSourceOverrideTarget")
                        if path not in bmc.docs:
                            return self.error(404, "Base.1.0.ResourceMissingAtURI", path)
                        merge(bmc.docs[path], body or {})
                        return self.reply(204)
                    if self.command == "POST":
                        if path.endswith("ComputerSystem.Reset"):
                            kind = body["ResetType"]
                            bmc.docs[SYSTEM]["PowerState"] = "Off" if kind in (
                                "ForceOff", "GracefulShutdown") else "On"
                            return self.reply(204)
                        if path.endswith("VirtualMedia.InsertMedia"):
                            dev = bmc.docs[path.split("/Actions")[0]]
                            dev.update(Image=body["Image"], Inserted=True)
                            return self.reply(204)
                        if path.endswith("VirtualMedia.EjectMedia"):
                            dev = bmc.docs[path.split("/Actions")[0]]
                            dev.update(Image=None, Inserted=False)
                            return self.reply(204)
                    return self.error(405, "Base.1.0.GeneralError", "not supported")

            do_GET = do_PATCH = do_POST = handle_any

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def requests(self, method, path=SYSTEM):
        return [body for m, p, body in self.log if m == method and p == path]

    @property
    def boot(self):
        return self.docs[SYSTEM]["Boot"]


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


FAST_BMC = dict(connect_timeout=1.0, read_timeout=2.0, retry_attempts=3, retry_interval=0.01,
                retry_max_interval=0.05, power_poll_interval=0.01, power_timeout=2.0,
                post_retry_interval=0.02, post_retry_timeout=2.0)


def make_conf(state_path, public_url="http://[fd00:b007::1]:6480", **bmc_overrides):
    return redfish_conf_mod.make_conf(state_path, public_url, IPXE_EFI, FAST_BMC, **bmc_overrides)


_fresh_bmc_connection_cache = redfish_conf_mod.fresh_bmc_connection_cache
