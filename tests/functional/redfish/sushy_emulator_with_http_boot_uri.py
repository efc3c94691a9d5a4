"""sushy-emulator (fake driver) extended to store HttpBootUri per system -- a test helper.

Run as ``python sushy_emulator_with_http_boot_uri.py --config CONF`` instead of
``sushy-emulator``. Differences from stock sushy-tools 2.x with
``SUSHY_EMULATOR_FAKE_DRIVER = True``, each named here so no test relies on one
by accident:

1. ``Boot.HttpBootUri`` is stored per system and read back (the stock fake
   driver answers 400 "Failed to save HttpBootUri field value" after having
   downloaded the URI and attached it as a CD; the libvirt driver keeps one
   value for all systems). A ``null`` clears it.
2. The Boot PATCH is handled here: ``BootSourceOverrideTarget`` (``UefiHttp``
   included, checked against the advertised AllowableValues like a BMC does),
   ``BootSourceOverrideEnabled`` and ``BootSourceOverrideMode`` are stored as
   sent and read back (stock: Enabled always reads ``Continuous``, UefiHttp is
   rewritten to Pxe or Cd). Initially Enabled reads ``Disabled``.
3. Power changes still apply late (so callers must poll), but after
   ``SUSHY_EMULATOR_POWER_DELAY`` = (min, max) seconds, default (0.2, 0.6),
   instead of a random 1-11 s, to keep tests fast.

4. With ``METALBOOT_EMULATOR_REQUEST_LOG`` set to a file name, the method and
   path of every request are appended to that file, one line each (the stock
   log colours POST and PATCH lines, which a parser of it misses).

Virtual media, resets, auth (``SUSHY_EMULATOR_AUTH_FILE``) and everything else
are the stock emulator's.
"""

import json
import os
import random
import sys
import threading
import time

import flask
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems import fakedriver


class FakeDriverWithHttpBootUri(fakedriver.FakeDriver):
    """The fake driver plus per-system HttpBootUri and Enabled, and short power delays."""

    def get_http_boot_uri(self, identity):
        return self._get(identity).get("http_boot_uri")

    def set_system_http_boot_uri(self, identity, uri):
        self._update(identity, http_boot_uri=uri)

    def get_boot_enabled(self, identity):
        return self._get(identity).get("boot_enabled", "Disabled")

    def set_boot_enabled(self, identity, enabled):
        self._update(identity, boot_enabled=enabled)

    def set_power_state(self, identity, state):
        low, high = self._config.get("SUSHY_EMULATOR_POWER_DELAY", (0.2, 0.6))
        apply_time = time.time() + random.uniform(low, high)
        system = self._get(identity)
        if "On" in state:
            pending = "On"
        elif state in ("ForceOff", "GracefulShutdown"):
            pending = "Off"
        elif "Restart" in state:
            system["power_state"] = "Off"
            pending = state
        else:
            raise fakedriver.error.NotSupportedError(f"Power state {state} is not supported")
        if system["power_state"] != pending:
            self._update(system, pending_power={"power_state": pending,
                                                "apply_time": apply_time})


fakedriver.FakeDriver = FakeDriverWithHttpBootUri

_stock_system_resource = emulator.app.view_functions["system_resource"]


def _uefi(systems, uuid):
    # Like the stock system.json template: UefiHttp and HttpBootUri exist only
    # for systems in UEFI mode.
    try:
        return systems.get_boot_mode(uuid) == "UEFI"
    except fakedriver.error.NotSupportedError:
        return False


def _allowed_targets(systems, uuid):
    return ["Pxe", "Cd", "Hdd"] + (["UefiHttp"] if _uefi(systems, uuid) else [])


def _error(message, status=400):
    return flask.Response(json.dumps({"error": {"code": "Base.1.0.PropertyValueNotInList",
                                                "message": message}}),
                          status=status, content_type="application/json")


def system_resource(identity):
    request = flask.request
    systems = emulator.app.systems
    if request.method == "GET":
        response = _stock_system_resource(identity)
        if response.status_code != 200:
            return response
        document = json.loads(response.get_data())
        boot = document.setdefault("Boot", {})
        uuid = systems.uuid(identity)
        boot["BootSourceOverrideEnabled"] = systems.get_boot_enabled(uuid)
        if "HttpBootUri" in boot:
            boot["HttpBootUri"] = systems.get_http_boot_uri(uuid)
        response.set_data(json.dumps(document, indent=2))
        return response
    body = request.get_json(silent=True) or {}
    boot = body.get("Boot")
    if boot is None or "IndicatorLED" in body:
        return _stock_system_resource(identity)
    uuid = systems.uuid(identity)
    target = boot.get("BootSourceOverrideTarget")
    enabled = boot.get("BootSourceOverrideEnabled")
    mode = boot.get("BootSourceOverrideMode")
    if target and target not in _allowed_targets(systems, uuid):
        return _error(f"BootSourceOverrideTarget {target} not in AllowableValues")
    if enabled and enabled not in ("Once", "Continuous", "Disabled"):
        return _error(f"BootSourceOverrideEnabled {enabled} invalid")
    if "HttpBootUri" in boot:
        if not _uefi(systems, uuid):
            return _error("HttpBootUri is not supported by this system")
        systems.set_system_http_boot_uri(uuid, boot["HttpBootUri"])
    if target:
        systems.set_boot_device(uuid, target)
    if enabled:
        systems.set_boot_enabled(uuid, enabled)
    if mode:
        systems.set_boot_mode(uuid, mode)
    if not (target or enabled or mode or "HttpBootUri" in boot):
        return _error("empty Boot")
    return flask.Response(status=204)


emulator.app.view_functions["system_resource"] = system_resource

_REQUEST_LOG = os.environ.get("METALBOOT_EMULATOR_REQUEST_LOG")
_REQUEST_LOG_LOCK = threading.Lock()


@emulator.app.before_request
def log_request():
    """Every request, method and path, to METALBOOT_EMULATOR_REQUEST_LOG."""
    if _REQUEST_LOG:
        with _REQUEST_LOG_LOCK, open(_REQUEST_LOG, "a") as f:
            f.write(f"{flask.request.method} {flask.request.path}\n")

if __name__ == "__main__":
    sys.exit(emulator.main())
