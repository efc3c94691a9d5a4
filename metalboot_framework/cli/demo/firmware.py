"""The machine side of the demo: simulated firmware and iPXE behind the emulated BMCs.

The emulator cannot boot anything, so this plays what a real machine does
after metalboot reset it through its BMC.
"""

import io
import re
import threading
import time

import requests

from metalboot_framework.cli.client import CliError, Client
from metalboot_framework.cli.demo.plan import REDFISH

CHAIN_RE = re.compile(r"\bchain\s+(\S+)")
MAC_VARIABLE_RE = re.compile(r"\$\{net\$\{idx\}/mac\}|\$\{net\d+/mac\}")


class SimulatedRedfishMachines:
    """Plays the machines behind the emulated BMCs.

    Follows the API's event feed; after metalboot reset a system (event
    ``redfish-virtual-media-ipxe.reset``), it reads what the BMC (emulator) holds
    for that system: power, boot override, the virtual CD's image. If the CD is
    inserted and the one-time override says Cd, the "firmware" boots it:
    downloads the ISO from the image URL, reads /autoexec.ipxe and does what
    iPXE would -- fetch the ``chain`` URL with each NIC's MAC until one answers.
    """

    def __init__(self, api_url, token, emulator_url, systems_by_machine):
        self.api = Client(api_url, token, timeout=30)
        self.emulator_url = emulator_url
        self.systems = systems_by_machine
        self.log = {}  # machine id -> [lines]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="simulated-machines")
        self.cursor = 0

    def start(self):
        """Skips the events so far, then follows the feed in a thread."""
        body = self.api.get("/v1/events", since=0, limit=1000)
        while body["events"]:
            self.cursor = body["next_cursor"]
            body = self.api.get("/v1/events", since=self.cursor, limit=1000)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self):
        while not self._stop.is_set():
            try:
                body = self.api.get("/v1/events", since=self.cursor, limit=1000)
            except CliError:
                self._stop.wait(0.2)
                continue
            for event in body["events"]:
                if event["kind"] == f"{REDFISH}.reset" and event.get("machine_id") in \
                        self.systems:
                    threading.Thread(target=self._boot, args=(event["machine_id"],),
                                     daemon=True).start()
            self.cursor = body["next_cursor"]
            if not body["events"]:
                self._stop.wait(0.2)

    def _note(self, machine_id, line):
        self.log.setdefault(machine_id, []).append(line)

    def _boot(self, machine_id):
        try:
            self._boot_once(machine_id)
        except Exception as exc:  # a simulated machine that fails just does not boot
            self._note(machine_id, f"simulated boot failed: {type(exc).__name__}: {exc}")

    def _boot_once(self, machine_id):
        """Firmware: boot the virtual CD if the BMC says so; then iPXE runs its script."""
        system_path = f"{self.emulator_url}/redfish/v1/Systems/{self.systems[machine_id]}"
        system = self._system_once_on(system_path)
        boot = system.get("Boot") or {}
        cd = requests.get(f"{system_path}/VirtualMedia/Cd", timeout=10).json()
        self._note(machine_id, f"BMC: power {system.get('PowerState')}, boot override "
                               f"{boot.get('BootSourceOverrideTarget')} "
                               f"({boot.get('BootSourceOverrideMode')}), virtual CD "
                               f"{'inserted' if cd.get('Inserted') else 'empty'}")
        if system.get("PowerState") != "On" or boot.get("BootSourceOverrideTarget") != "Cd" \
                or not cd.get("Inserted") or not cd.get("Image"):
            self._note(machine_id, "firmware: nothing to boot from the virtual CD")
            return
        iso = requests.get(cd["Image"], timeout=60)
        iso.raise_for_status()
        match = CHAIN_RE.search(autoexec_from_iso(iso.content))
        self._note(machine_id, f"firmware: booted {cd['Image'].rsplit('/', 1)[-1]} "
                               f"({len(iso.content) // 1024} KiB), iPXE runs autoexec.ipxe")
        if not match:
            self._note(machine_id, "iPXE: autoexec.ipxe has no chain command")
            return
        self._chain(machine_id, match.group(1), self._macs(system_path))

    @staticmethod
    def _system_once_on(system_path, timeout=30):
        """The system's Redfish resource, once on (or after ``timeout``).

        The emulator applies power changes a few seconds late.
        """
        deadline = time.monotonic() + timeout
        while True:
            system = requests.get(system_path, timeout=10).json()
            if system.get("PowerState") == "On" or time.monotonic() > deadline:
                return system
            time.sleep(0.25)

    def _macs(self, system_path):
        nics = requests.get(f"{system_path}/EthernetInterfaces", timeout=10).json()
        macs = []
        for member in nics.get("Members", []):
            nic = requests.get(self.emulator_url + member["@odata.id"], timeout=10).json()
            if nic.get("MACAddress"):
                macs.append(nic["MACAddress"].lower())
        return macs

    def _chain(self, machine_id, url_template, macs):
        """iPXE's ``chain``: the URL with each NIC's MAC, until one answers 200."""
        for mac in macs:
            url = MAC_VARIABLE_RE.sub(mac, url_template)
            status = requests.get(url, timeout=30).status_code
            self._note(machine_id, f"iPXE: chain {url} -> HTTP {status}")
            if status == 200:
                return


def autoexec_from_iso(data):
    """The text of ``autoexec.ipxe`` in an ISO image (Joliet name, else ISO 9660 name)."""
    import pycdlib
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(data))
    try:
        out = io.BytesIO()
        try:
            iso.get_file_from_iso_fp(out, joliet_path="/autoexec.ipxe")
        except pycdlib.pycdlibexception.PyCdlibException:
            iso.get_file_from_iso_fp(out, iso_path="/AUTOEXEC.IPX;1")
        return out.getvalue().decode("utf-8", "replace")
    finally:
        iso.close()
