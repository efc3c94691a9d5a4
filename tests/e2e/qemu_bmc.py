"""A BMC for a QEMU/OVMF machine: sushy-emulator (fake driver) linked to a QEMU process.

A test harness, named as one: it is *not* sushy-tools' libvirt driver. Run as
``python qemu_bmc.py --config CONF`` inside the boot network's namespace (the
QEMU processes it starts inherit the namespace and use its tap devices).

It extends ``tests/functional/redfish/sushy_emulator_with_http_boot_uri.py``
(Boot override, ``BootSourceOverrideEnabled`` and ``HttpBootUri`` stored per
system, UefiHttp allowed) and links the fake driver's state to a real machine:

* **Power/Reset** start and stop ``qemu-system-x86_64 -accel tcg`` with OVMF
  and a virtio-net NIC with ``romfile=`` (the firmware's own PXE/HTTP boot
  stack, no iPXE option ROM). On, ForceOn: start if off; ForceOff,
  GracefulShutdown: kill; ForceRestart, GracefulRestart, PowerCycle: kill and
  start. Power state changes at once; ``PowerState`` reads ``Off`` when the
  QEMU process has exited (the guest powered off).
* Before each start the machine's persistent NVRAM copy (``vars.fd``) is
  edited with ``virt-fw-vars`` (PyPI virt-firmware) from the Redfish boot
  override, the way a BMC programs the firmware:

  ==============================  ==============================================
  override (Enabled Once/Cont.)   NVRAM written before the start
  ==============================  ==============================================
  ``Pxe``                         BootOrder PXEv4, PXEv6, then the rest
  ``Cd``                          BootOrder CD-ROM first (the inserted ISO)
  ``UefiHttp`` + ``HttpBootUri``  ``--set-boot-uri URI`` (a URI boot entry, once
                                  through BootNext), then the default order
  ``UefiHttp`` without URI        BootOrder HTTPv4, HTTPv6 (OVMF sends its HTTP
                                  boot DHCPv6 Solicit only after an HTTPv4
                                  attempt in the same boot), then the rest
  none / ``Disabled``             default order: CD-ROM, PXEv4, PXEv6, HTTPv4,
                                  HTTPv6
  ==============================  ==============================================

  The boot entries are written with the same description, device path and
  optional data OVMF itself creates for the NIC and the CD-ROM, so a machine
  needs no enumeration boot first. ``Once`` is consumed at the start
  (``BootSourceOverrideEnabled`` reads ``Disabled`` afterwards), like a BMC.
* **Virtual media**: the image the stock emulator downloads on InsertMedia is
  attached as the machine's SATA CD-ROM at the next start (an empty drive
  otherwise); EjectMedia empties it for the next start.

Extra config keys: ``E2E_MACHINES = {uuid: {"mac", "tap", "workdir",
"ovmf_code", "ovmf_vars", "memory"}}``. Every start is appended to
``<workdir>/boots.jsonl`` (time, reset type, override, NVRAM edits, media)
and QEMU's serial console to ``<workdir>/serial.log``; QEMU's pid is in
``<workdir>/qemu.pid`` so the harness can stop it even if this process dies.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "functional", "redfish"))

import sushy_emulator_with_http_boot_uri as base  # noqa: E402  (patches the emulator)
from sushy_tools import error  # noqa: E402
from sushy_tools.emulator import main as emulator  # noqa: E402
from sushy_tools.emulator.resources.systems import fakedriver  # noqa: E402

VIRT_FW_VARS = os.environ.get("E2E_VIRT_FW_VARS") or shutil.which("virt-fw-vars") or \
    "virt-fw-vars"

#: Optional data OVMF puts into the boot options it creates itself.
OVMF_AUTO_OPTION = "4eac0881119f594d850ee21a522c59b2"
NIC_PCI_SLOT = 3  # -device virtio-net-pci,addr=0x3
EFI_GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

# Device path nodes, as OVMF (Debian 12, OVMF_CODE_4M.fd) writes them.
_PCIROOT = "02010c00d041030a00000000"
_END = "7fff0400"
_IPV4 = "030c1b00" + "00" * 23
_IPV6 = "030d3c00" + "00" * 39 + "40" + "00" * 16
_URI = "03180400"
_SATA_CD = "01010600021f" + "03120a000000ffff0000"  # Pci(0x1F,0x2)/Sata(0x0,0xFFFF,0x0)

# Fixed numbers of the entries this BMC writes.
PXE4, PXE6, HTTP4, HTTP6, CDROM = 0x0001, 0x0002, 0x0003, 0x0004, 0x000A
URI6 = 0x0005  # HttpBootUri on an IPv6-only network: MAC/IPv6/Uri(the URI)
DEFAULT_ORDER = [CDROM, PXE4, PXE6, HTTP4, HTTP6]
# On an IPv6-only network (no DHCPv4 answers): OVMF's first network boot attempt
# never sends its HTTP-boot DHCPv6 Solicit, and a PXEv4 attempt waits ~60 s for
# an offer; PXEv6 (Kea answers with an address, no boot file) fails in ~15 s and
# lets the HTTPv6 attempt after it work.
DEFAULT_ORDER_V6 = [CDROM, PXE6, HTTP6, PXE4, HTTP4]


def _pci(slot):
    return "01010600" + "00" + f"{slot:02x}"


def _mac(mac):
    return "030b2500" + mac.replace(":", "").lower() + "00" * 26 + "01"


def _load_option(description, devpath_hex, auto=True):
    """An EFI_LOAD_OPTION; ``auto``: with the optional data that marks the
    entries OVMF creates itself (which its boot manager may refresh)."""
    desc = (description + "\0").encode("utf-16-le")
    path = bytes.fromhex(devpath_hex + _END)
    data = (1).to_bytes(4, "little") + len(path).to_bytes(2, "little") + desc + path + \
        (bytes.fromhex(OVMF_AUTO_OPTION) if auto else b"")
    return data.hex()


def _uri(uri):
    data = uri.encode()
    return "0318" + (4 + len(data)).to_bytes(2, "little").hex() + data.hex()


def boot_entries(mac, uri6=None):
    """{number: (description, load option hex)} of the NIC's and CD-ROM's entries
    (and, with ``uri6``, of an HTTPv6 entry for that URI)."""
    tag = mac.replace(":", "").upper()
    nic = _PCIROOT + _pci(NIC_PCI_SLOT) + _mac(mac)
    extra = {URI6: (f"UEFI HTTPv6 URI (MAC:{tag})", nic + _IPV6 + _uri(uri6))} if uri6 else {}
    return {**extra,
        PXE4: (f"UEFI PXEv4 (MAC:{tag})", nic + _IPV4),
        PXE6: (f"UEFI PXEv6 (MAC:{tag})", nic + _IPV6),
        HTTP4: (f"UEFI HTTPv4 (MAC:{tag})", nic + _IPV4 + _URI),
        HTTP6: (f"UEFI HTTPv6 (MAC:{tag})", nic + _IPV6 + _URI),
        CDROM: ("UEFI QEMU DVD-ROM QM00001 ", _PCIROOT + _SATA_CD),
    }


def plan_boot(target, enabled, uri, ipv6_only=False):
    """(boot order, boot URI or None, description) for the next start; on an
    IPv6-only network the URI is an entry of its own (``URI6``), since
    ``virt-fw-vars --set-boot-uri`` writes an IPv4 one."""
    active = enabled in ("Once", "Continuous")
    first = []
    boot_uri = None
    if active and target == "Pxe":
        first = [PXE4, PXE6]
    elif active and target in ("Cd", "UsbCd"):
        first = [CDROM]
    elif active and target == "UefiHttp" and uri and ipv6_only:
        first = [PXE6, URI6]
    elif active and target == "UefiHttp" and uri:
        boot_uri = uri
    elif active and target == "UefiHttp":
        first = [PXE6, HTTP6] if ipv6_only else [HTTP4, HTTP6]
    default = DEFAULT_ORDER_V6 if ipv6_only else DEFAULT_ORDER
    order = first + [n for n in default if n not in first]
    what = f"{target if active else 'no override'}" + (f" ({enabled})" if active else "")
    return order, boot_uri, what


class QemuMachine:
    """One QEMU process at a time for one machine."""

    def __init__(self, uuid, spec):
        self.uuid = uuid
        self.spec = spec
        self.workdir = spec["workdir"]
        os.makedirs(self.workdir, exist_ok=True)
        self.vars = os.path.join(self.workdir, "vars.fd")
        self.pid_file = os.path.join(self.workdir, "qemu.pid")
        self.proc = None
        self.lock = threading.Lock()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
        try:
            os.unlink(self.pid_file)
        except FileNotFoundError:
            pass

    def program_nvram(self, order, boot_uri, uri6=None):
        if not os.path.exists(self.vars):
            shutil.copyfile(self.spec["ovmf_vars"], self.vars)
        variables = [{"name": f"Boot{n:04X}", "guid": EFI_GLOBAL, "attr": 7,
                      "data": _load_option(desc, path, auto=n != URI6)}
                     for n, (desc, path) in boot_entries(self.spec["mac"], uri6).items()]
        variables.append({"name": "BootOrder", "guid": EFI_GLOBAL, "attr": 7,
                          "data": "".join(n.to_bytes(2, "little").hex() for n in order)})
        json_path = os.path.join(self.workdir, "nvram-edit.json")
        with open(json_path, "w") as f:
            json.dump({"version": 2, "variables": variables}, f)
        cmd = [VIRT_FW_VARS, "--inplace", self.vars, "--set-json", json_path]
        if self._has_var("BootNext"):
            cmd += ["--delete", "BootNext"]
        if boot_uri:
            cmd += ["--set-boot-uri", boot_uri]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            raise error.FishyError(f"virt-fw-vars failed: {out.stderr.strip()}")
        return cmd

    def _has_var(self, name):
        out = subprocess.run([VIRT_FW_VARS, "-i", self.vars, "--output-json", "/dev/stdout"],
                             capture_output=True, text=True)
        try:
            return any(v["name"] == name for v in json.loads(out.stdout)["variables"])
        except (ValueError, KeyError):
            return False

    def start(self, reset_type, target, enabled, uri, cd_image):
        ipv6_only = self.spec.get("ipv6_only", False)
        order, boot_uri, what = plan_boot(target, enabled, uri, ipv6_only)
        cmd = self.program_nvram(order, boot_uri, uri if URI6 in order else None)
        spec = self.spec
        serial = os.path.join(self.workdir, "serial.log")
        with open(serial, "a") as f:
            f.write(f"\n==== metalboot-e2e BMC: start at {time.time():.3f} ({reset_type}; "
                    f"{what}) ====\n")
        cd = "if=none,id=cd,media=cdrom,readonly=on" + (f",file={cd_image}" if cd_image else "")
        qemu = [
            spec.get("qemu", "qemu-system-x86_64"), "-name", f"metalboot-e2e-{self.uuid[:8]}",
            "-machine", "q35", "-accel", "tcg", "-m", str(spec.get("memory", 768)),
            "-smp", "1", "-display", "none", "-no-user-config", "-nodefaults",
            "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={spec['ovmf_code']}",
            "-drive", f"if=pflash,format=raw,unit=1,file={self.vars}",
            "-netdev", f"tap,id=n0,ifname={spec['tap']},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={spec['mac']},romfile=,"
                       f"addr={NIC_PCI_SLOT:#x}",
            "-drive", cd, "-device", "ide-cd,drive=cd,bus=ide.0",
            "-chardev", f"file,id=ser0,path={serial},append=on", "-serial", "chardev:ser0",
            "-pidfile", self.pid_file,
        ]
        if spec.get("cacerts"):  # the CAs OVMF's HTTPS boot trusts (EFI signature list)
            qemu += ["-fw_cfg", f"name=etc/edk2/https/cacerts,file={spec['cacerts']}"]
        log = open(os.path.join(self.workdir, "qemu.log"), "ab")
        self.proc = subprocess.Popen(qemu, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        with open(os.path.join(self.workdir, "boots.jsonl"), "a") as f:
            f.write(json.dumps({"time": time.time(), "reset": reset_type, "override": what,
                                "boot_order": [f"{n:04X}" for n in order],
                                "boot_uri": boot_uri or (uri if URI6 in order else None),
                                "cd": cd_image,
                                "nvram_edit": cmd, "pid": self.proc.pid}) + "\n")


class QemuLinkedDriver(base.FakeDriverWithHttpBootUri):
    """The fake driver whose power actions and boot settings drive a QemuMachine."""

    _machines = {}
    _machines_lock = threading.Lock()

    def _machine(self, identity):
        uuid = self.uuid(identity)
        with self._machines_lock:
            machine = self._machines.get(uuid)
            if machine is None:
                spec = self._config["E2E_MACHINES"].get(uuid)
                if spec is None:
                    raise error.NotFound(f"no QEMU machine for system {uuid}")
                machine = self._machines[uuid] = QemuMachine(uuid, spec)
            return machine

    def get_power_state(self, identity):
        return "On" if self._machine(identity).running() else "Off"

    def set_power_state(self, identity, state):
        machine = self._machine(identity)
        with machine.lock:
            if state in ("On", "ForceOn"):
                if not machine.running():
                    self._start(identity, machine, state)
            elif state in ("ForceOff", "GracefulShutdown"):
                machine.stop()
            elif state in ("ForceRestart", "GracefulRestart", "PowerCycle"):
                machine.stop()
                self._start(identity, machine, state)
            else:
                raise error.NotSupportedError(f"Power state {state} is not supported")
        self._update(identity, power_state=self.get_power_state(identity))

    def _start(self, identity, machine, reset_type):
        system = self._get(identity)
        target = system.get("boot_device", "Hdd")
        enabled = system.get("boot_enabled", "Disabled")
        uri = system.get("http_boot_uri")
        image, _, inserted = self.get_boot_image(system["uuid"], "Cd")
        machine.start(reset_type, target, enabled, uri, image if inserted else None)
        if enabled == "Once":
            self._update(identity, boot_enabled="Disabled")


fakedriver.FakeDriver = QemuLinkedDriver


def _shutdown(signum, _frame):
    for machine in list(QemuLinkedDriver._machines.values()):
        machine.stop()
    os._exit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _shutdown)
    signal.signal(signal.SIGINT, _shutdown)
    try:
        sys.exit(emulator.main())
    finally:
        for m in list(QemuLinkedDriver._machines.values()):
            m.stop()
