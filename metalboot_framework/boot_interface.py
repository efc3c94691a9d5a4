"""The contract every boot interface implements.

A boot interface answers, for one machine, how its firmware gets the first
stage of the boot: what it needs to know about the machine, whether it can
work, how to prepare and activate the path, what proves the machine booted
through it, and how to remove every trace of it again.

The conductor may be killed between any two calls, and calls it again after a
restart: every step must be safe to repeat (idempotent), and ``clean_up`` must
succeed on a machine on which ``prepare`` never ran or ran only halfway.

The four steps (``validate``, ``prepare``, ``activate``, ``clean_up``) may be
plain methods, which block a worker thread of the conductor while they run, or
coroutines (``async def``), which the conductor awaits on its step loop
without a thread (:mod:`metalboot_framework.steploop`); a coroutine step must
not block.

Plugins subclass :class:`BootInterface` and are registered under the entry-point
namespace ``metalboot.boot_interfaces``; the entry-point name is the interface's
name, which the loader sets as :attr:`BootInterface.name`.
"""

import abc
import dataclasses
import enum
from typing import Any, Mapping, Optional, Sequence


class Capability(str, enum.Enum):
    """Facts about a boot interface that callers may select or filter on."""

    NEEDS_BMC = "needs_bmc"            # activate talks to the machine's BMC
    NEEDS_DHCP = "needs_dhcp"          # prepare writes DHCP server entries
    UEFI_ONLY = "uefi_only"            # machines must boot in UEFI mode
    BIOS = "bios"                      # works for legacy BIOS boot too
    IPV4 = "ipv4"                      # the firmware boots over IPv4
    IPV6 = "ipv6"                      # the firmware boots over IPv6
    VIRTUAL_MEDIA = "virtual_media"    # boots from media the BMC inserts
    LAYER3 = "layer3"                  # needs no layer-2 boot VLAN
    SIMULATED = "simulated"            # touches no real machine (fake)


@dataclasses.dataclass(frozen=True)
class Property:
    """A machine field or property a boot interface reads."""

    description: str
    required: bool = False


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One observation that a machine booted (or started to boot) somewhere.

    ``kind`` is ``"fetch"`` for an artifact download recorded by the artifact
    server (``path`` is the artifact name) and ``"report"`` for a boot report the
    machine posted with its per-machine token. ``"unverified"`` marks a fetch
    by MAC from an address not bound to the machine, or a fetch or report with
    the unbound token such a fetch gave out: it proves nothing, and a plugin's
    own ``recognise_evidence`` must not accept it either.
    """

    id: int
    machine_id: str
    interface: str
    kind: str
    path: str
    client_address: Optional[str]
    created_at: Any


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A file a boot interface serves to machines or BMCs.

    Exactly one of ``content`` (bytes, e.g. a rendered script) and ``path`` (a
    file on disk, e.g. a cached ISO) is set. The artifact server answers HTTP
    Range requests and conditional requests (ETag) for both.
    """

    content_type: str
    content: Optional[bytes] = None
    path: Optional[str] = None


class BootInterface(abc.ABC):
    """Base class of every boot interface.

    Each method takes a *task*: a :class:`metalboot_framework.task.BootTask`
    giving the machine record, its partition, per-machine artifact URLs and the
    configuration. A plugin reaches the machine's BMC with
    ``metalboot_framework.bmc.client_for_task(task)``; DHCP answers are
    published with ``task.apublish_dhcp_entries`` and applied by the
    partition's boot agents to the DHCP servers that :meth:`dhcp_backends`
    names in their configuration; those and the other modules of
    :mod:`metalboot_framework.sdk` are all a plugin may import. Methods raise
    :class:`metalboot_framework.exceptions.BootInterfaceError` (or a subclass)
    with a message that names what failed; any other exception is treated the
    same way but logged with its traceback.
    """

    #: Set by the loader from the entry-point name.
    name: str = ""

    #: Declared facts, see :class:`Capability`.
    capabilities: frozenset = frozenset()

    #: Artifact names (as in ``task.artifact_url(name)``) whose download by the
    #: machine proves it booted through this interface.
    evidence_artifacts: Sequence[str] = ("boot.ipxe",)

    #: Whether a boot report the machine posted counts as evidence on its own.
    accepts_boot_report: bool = True

    def dhcp_backends(self, conf) -> Mapping[str, Any]:
        """The DHCP backends (``metalboot_framework.dhcp.get_backend(name,
        conf)``) that the entries this interface publishes go to on a boot
        agent configured by ``conf``, keyed by the option naming each; ``{}``
        (the default) for an interface that publishes none. Raises
        :class:`~metalboot_framework.exceptions.ValidationFailed` for a
        backend that cannot be loaded."""
        return {}

    @abc.abstractmethod
    def get_properties(self) -> Mapping[str, Property]:
        """Return the machine fields and properties this interface reads.

        Keys are field names of the machine record (``bmc.address``,
        ``nics``, ``boot_mode``) or keys of its ``properties`` mapping.
        """

    @abc.abstractmethod
    def validate(self, task) -> None:
        """Check that the machine can use this interface; change nothing.

        Must be fast and free of side effects on the machine, its BMC and the
        DHCP servers (reading a BMC is allowed). Raises
        :class:`~metalboot_framework.exceptions.ValidationFailed` naming each
        missing or wrong property.
        """

    @abc.abstractmethod
    def prepare(self, task) -> None:
        """Create what the path needs before the machine resets.

        Artifacts, DHCP reservations, media images. Must not make the machine
        boot differently yet where that can be avoided, and must be idempotent.
        """

    @abc.abstractmethod
    def activate(self, task) -> None:
        """Make the machine's next boot take this path, and reset the machine.

        E.g. set the BMC boot override, insert virtual media, power-cycle.
        Idempotent: a second call re-applies the settings and resets again.
        """

    @abc.abstractmethod
    def clean_up(self, task) -> None:
        """Remove everything ``prepare`` and ``activate`` set, completely.

        Called when a machine leaves this interface (after a successful
        migration away from it, or in a rollback). Must succeed when nothing is
        left to remove.
        """

    def recognise_evidence(self, task, records: Sequence[Evidence]) -> Optional[Evidence]:
        """Return the record that proves the machine booted through this path.

        ``records`` are the machine's evidence since the last activation, oldest
        first. The default accepts a fetch of one of :attr:`evidence_artifacts`
        under this interface's URLs, or a boot report naming this interface.
        """
        for record in records:
            if record.interface != self.name or record.machine_id != task.machine_id:
                continue
            if record.kind == "fetch" and record.path in self.evidence_artifacts:
                return record
            if record.kind == "report" and self.accepts_boot_report:
                return record
        return None

    def get_artifact(self, task, name) -> Optional[Artifact]:
        """Return per-machine artifact ``name`` (served under ``task.artifact_url``).

        The core serves ``boot.ipxe`` for every interface itself; a plugin adds
        others (e.g. an EFI binary for UEFI HTTP boot). ``None``: no such artifact
        (404). Each fetch of an artifact served is recorded as evidence.
        """
        return None

    def get_partition_artifact(self, services, partition, name) -> Optional[Artifact]:
        """Return artifact ``name`` shared by all machines of ``partition``.

        Served under ``services.partition_artifact_url(partition.id, interface,
        name)``, e.g. the iPXE ISO that BMCs mount as virtual media. Fetches are
        not evidence (a BMC, not the machine, downloads them). ``None``: no such
        artifact.
        """
        return None

    def check_drift(self, task) -> Sequence[str]:
        """Return the differences between the machine and this path's settings.

        Called periodically for machines at rest on this interface (e.g. "BMC
        boot override is Hdd, expected Pxe"). An empty list means no drift.
        Read-only; the default finds none.
        """
        return []

    def describe(self) -> dict:
        """Name, description, properties and capabilities, for the API."""
        return {
            "name": self.name,
            "description": (self.__doc__ or "").strip().split("\n\n")[0].replace("\n", " "),
            "capabilities": sorted(c.value for c in self.capabilities),
            "properties": {
                key: {"description": prop.description, "required": prop.required}
                for key, prop in sorted(self.get_properties().items())
            },
            "evidence_artifacts": list(self.evidence_artifacts),
            "accepts_boot_report": self.accepts_boot_report,
        }
