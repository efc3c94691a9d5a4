"""Which migration the demo can show on this machine, and why not the Redfish one."""

import dataclasses
import importlib.util
import shutil

from metalboot_framework.cli.client import CliError

REDFISH = "redfish-virtual-media-ipxe"
NO_EMULATOR = ("sushy-tools is not installed (pip install '.[demo]' in metalboot's source "
               "directory)")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The demo's path: with or without the BMC emulator, to Redfish or to fake-alt."""

    have_emulator: bool
    use_redfish: bool
    why_not: str | None  # why the Redfish path is not used; None when it is

    @property
    def target(self):
        return REDFISH if self.use_redfish else "fake-alt"

    @property
    def interfaces(self):
        """The boot interfaces the server enables."""
        return ["fake", "fake-alt"] + ([REDFISH] if self.use_redfish else [])


def redfish_prerequisites(ipxe_efi):
    """None when the Redfish path can run here, else why not."""
    if importlib.util.find_spec("metalboot_redfish") is None:
        return "the metalboot_redfish plugin is not installed"
    try:
        with open(ipxe_efi, "rb") as f:
            if f.read(2) != b"MZ":
                return f"{ipxe_efi} is not an EFI binary"
    except OSError as exc:
        return f"no iPXE EFI binary at {ipxe_efi} ({exc.strerror}; Debian: apt-get install ipxe)"
    missing = [t for t in ("mkfs.vfat", "mmd", "mcopy") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not found (Debian: apt-get install dosfstools mtools)"
    if importlib.util.find_spec("pycdlib") is None:
        return "pycdlib is not installed"
    return None


def choose_plan(interface, ipxe_efi):
    """The plan for ``--interface`` (auto, redfish or fake); CliError if redfish cannot run."""
    have_emulator = importlib.util.find_spec("sushy_tools") is not None
    why_not = redfish_prerequisites(ipxe_efi) if have_emulator else NO_EMULATOR
    if interface == "redfish" and why_not:
        raise CliError(f"cannot run the Redfish demo: {why_not}")
    use_redfish = interface != "fake" and why_not is None
    if interface == "fake":
        why_not = "--interface fake was given"
    return Plan(have_emulator, use_redfish, why_not)
