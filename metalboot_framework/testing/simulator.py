"""Simulated machines for the ``fake`` boot interfaces.

A :class:`SimulatedFleet` follows a metalboot server's event feed. When the
``fake`` plugin activates a machine (the moment a real BMC would reset it), the
simulated machine "boots": it fetches the boot URL it was given, as firmware
or iPXE would, or posts a boot report with the token from that URL, or does
nothing (a machine that never comes back). Every action goes over HTTP to
the server under test, so evidence is recorded exactly as for real machines.
"""

import logging
import threading
import time
import urllib.parse

import requests

LOG = logging.getLogger(__name__)

FETCH = "fetch"          # GET the boot URL (firmware / iPXE)
REPORT = "report"        # POST /boot-report with the machine token (metal-hammer)
SILENT = "silent"        # never boots
FETCH_404 = "fetch-404"  # fetches with a wrong token: 404, no evidence


class SimulatedFleet:
    """Boots simulated machines when metalboot activates them."""

    def __init__(self, api_url, token, default=FETCH, behaviour=None, boot_delay=0.0,
                 poll_interval=0.05, only_interfaces=None):
        self.api_url = api_url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.default = default
        self.behaviour = dict(behaviour or {})
        self.boot_delay = boot_delay
        self.poll_interval = poll_interval
        self.only_interfaces = only_interfaces
        self.boots = []  # (machine_id, interface, action, http status)
        self.cursor = 0
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        self.cursor = self._latest_cursor()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="simulated-fleet")
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _latest_cursor(self):
        cursor = 0
        while True:
            r = self.session.get(f"{self.api_url}/v1/events",
                                 params={"since": cursor, "limit": 1000}, timeout=30)
            r.raise_for_status()
            body = r.json()
            if not body["events"]:
                return cursor
            cursor = body["next_cursor"]

    def _loop(self):
        while not self._stop.is_set():
            try:
                r = self.session.get(f"{self.api_url}/v1/events",
                                     params={"since": self.cursor, "limit": 1000}, timeout=30)
                r.raise_for_status()
                body = r.json()
            except requests.RequestException as exc:
                LOG.debug("event feed not reachable: %s", exc)
                self._stop.wait(self.poll_interval)
                continue
            for event in body["events"]:
                # the fake interfaces' activate, under whichever name each was
                # loaded (fake.activate, fake-alt.activate): it carries the URL
                if event["kind"].endswith(".activate") and \
                        (event.get("data") or {}).get("boot_url"):
                    self._boot(event)
            self.cursor = body["next_cursor"]
            if not body["events"]:
                self._stop.wait(self.poll_interval)

    def _boot(self, event):
        data = event["data"] or {}
        machine_id, interface, url = event["machine_id"], data.get("interface"), data.get(
            "boot_url")
        if self.only_interfaces and interface not in self.only_interfaces:
            return
        action = self.behaviour.get(machine_id, self.default)
        if callable(action):
            action = action(machine_id, interface)
        status = None
        if self.boot_delay:
            time.sleep(self.boot_delay)
        try:
            if action == FETCH:
                status = requests.get(url, timeout=30).status_code
            elif action == FETCH_404:
                parts = url.split("/")
                parts[-2] = "0" * len(parts[-2])
                status = requests.get("/".join(parts), timeout=30).status_code
            elif action == REPORT:
                token = urllib.parse.urlsplit(url).path.split("/")[-2]
                status = requests.post(
                    f"{self.api_url}/v1/machines/{machine_id}/boot-report",
                    json={"boot_interface": interface, "message": "simulated metal-hammer"},
                    headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code
        except requests.RequestException as exc:
            LOG.warning("simulated boot of %s failed: %s", machine_id, exc)
        self.boots.append((machine_id, interface, action, status))
