"""What each vendor's BMC does, for the mock BMC, with the public source of each rule.

A :class:`Profile` names a corpus directory (``tests/redfish_corpus/<name>``,
real payloads), the changes the mock makes to those payloads to show a
documented state the captured payload does not (each with its source), and the
behaviour flags :class:`redfish_mock_bmc.MockRedfishBmc` acts on.
"""

import dataclasses
from typing import Optional, Sequence, Tuple

DELL_SYSTEM = "/redfish/v1/Systems/System.Embedded.1"
DELL_MANAGER = "/redfish/v1/Managers/iDRAC.Embedded.1"
SMC_MANAGER = "/redfish/v1/Managers/1"
SMC_SYSTEM = "/redfish/v1/Systems/1"
HPE_SYSTEM = "/redfish/v1/Systems/1"

#: Dell: the UEFI HTTP boot device attributes of the iDRAC9/10 BIOS attribute
#: registry (Dell "iDRAC Redfish API Guide", BIOS attributes HttpDev1*; Dell
#: iDRAC-Redfish-Scripting BiosSetAttributeREDFISH.py). The captured bios.json
#: is trimmed to BootMode, so the mock adds them in their factory state.
DELL_HTTP_DEVICE = {"HttpDev1EnDis": "Disabled", "HttpDev1Uri": "",
                    "HttpDev1Protocol": "IPv4", "HttpDev1Interface": "NIC.Integrated.1-1-1"}


def media_actions(device):
    """The DMTF InsertMedia and EjectMedia actions of the VirtualMedia at ``device``."""
    return {f"#VirtualMedia.{name}": {"target": f"{device}/Actions/VirtualMedia.{name}"}
            for name in ("InsertMedia", "EjectMedia")}


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    #: (path, patch merged into the document, source of the documented state)
    overlays: Sequence[Tuple[str, dict, str]] = ()
    #: PATCH without If-Match answers 428 (Lenovo XCC: Ansible community.general
    #: #56050; HPE iLO 5 "Using ETags"); a stale one 412 (RFC 7232).
    if_match_required: bool = False
    #: Where the ETag is given: "header", "body" (@odata.etag only: Lenovo XCC),
    #: "both", or "none" (no ETag at all; with if_match_required, a fault).
    etag_in: str = "header"
    #: How pending BIOS settings apply: "job" (Dell: only by a config job on
    #: Managers/iDRAC.Embedded.1/Jobs with TargetSettingsURI, or a PATCH with
    #: @Redfish.SettingsApplyTime OnReset, then a reset -- Dell iDRAC Redfish
    #: API Guide, "BIOS configuration"), or "reset" (DSP0266 Settings: HPE iLO,
    #: Lenovo XCC, DMTF mockups apply the Settings object on the next reset).
    bios_apply: str = "reset"
    #: Boot on the system is read-only; changes go to the system's
    #: @Redfish.Settings object and apply on reset (iDRAC10; sushy
    #: system.py _get_settings_or_self).
    boot_in_settings_object: bool = False
    #: A POST without a body answers 415 (HPE iLO 5/6 EjectMedia; sushy
    #: virtual_media.py retries it with {}).
    empty_post_415: bool = False
    #: Only these VirtualMedia Ids take an insert (iDRAC10: slot "1", Ironic
    #: drivers/modules/drac/boot.py); None = any with an InsertMedia action.
    insert_slots: Optional[Sequence[str]] = None
    #: VirtualMedia without actions is changed by PATCH of Image/Inserted
    #: (Lenovo XCC; sushy virtual_media.py _get_insert_media_uri).
    media_patch: bool = False
    #: The override targets with which the firmware boots the virtual CD
    #: (Supermicro: only UsbCd, Cd is a physical drive -- openstack/ironic
    #: drivers/modules/redfish/boot.py uses UsbCd there).
    cd_boot_targets: Sequence[str] = ("Cd", "UsbCd")
    #: A target change without BootSourceOverrideMode falls back to Legacy
    #: (Supermicro; openstack/ironic drivers/modules/redfish/management.py
    #: re-sends the mode after setting the boot device there).
    target_change_drops_mode: bool = False
    #: InsertMedia parameters the BMC refuses with 400 PropertyUnknown
    #: (Supermicro BMC firmware 01.74.02, an X11 BMC: "The property Inserted is
    #: not in the list of valid properties for the resource." --
    #: ansible-collections/community.general pull request 4839; openstack/sushy
    #: virtual_media.py leaves both out of InsertMedia for SuperMicro X11/X12).
    insert_refuses: Sequence[str] = ()
    #: EjectMedia clears Image and Inserted but leaves ImageName as it was
    #: (Supermicro: community.general pull request 4839, firmware 01.74.02;
    #: pull request 12537, X12STW-TF and H13SRD-F, where ConnectedVia reads
    #: NotConnected after the eject).
    eject_keeps_image_name: bool = False
    #: The MessageId with which this BMC says "busy, try again" and its status.
    busy: Tuple[int, str, str] = (503, "Base.1.8.ServiceTemporarilyUnavailable",
                                  "The service is temporarily unavailable.")


PROFILES = {
    "dell-idrac9": Profile(
        "dell-idrac9",
        overlays=(
            (DELL_SYSTEM, {"VirtualMedia": {"@odata.id": DELL_SYSTEM + "/VirtualMedia"}},
             "iDRAC9 6.x+ lists VirtualMedia on the system (bmclib fixture "
             "dell/system.embedded.1.virtualmedia.json)"),
            (DELL_MANAGER, {"FirmwareVersion": "7.00.00.00", "Model": "15G Monolithic",
                            "Manufacturer": "Dell Inc."},
             "iDRAC9 firmware 7.x (Dell iDRAC9 release notes); the captured manager is 17G"),
            (DELL_SYSTEM + "/Bios", {"Attributes": dict(DELL_HTTP_DEVICE, BootMode="Uefi")},
             "Dell BIOS attribute registry HttpDev1*"),
            ("/redfish/v1/", {"Vendor": "Dell",
                              "Product": "Integrated Dell Remote Access Controller"},
             "an iDRAC's service root names vendor and product (ServiceRoot v1_5 Vendor, "
             "Product): stmcginnis/gofish oem/dell/test/dell_test.go at d3e2dde6b4cc; "
             "the captured one is trimmed to its links"),
        ),
        bios_apply="job",
        busy=(400, "IDRAC.2.8.SYS518", "iDRAC is not ready. The configuration values "
                                       "cannot be accessed. Retry the operation."),
    ),
    "dell-idrac10": Profile(
        "dell-idrac10",
        overlays=(
            (DELL_SYSTEM, {"VirtualMedia": {"@odata.id": DELL_SYSTEM + "/VirtualMedia"}},
             "iDRAC10 lists VirtualMedia on the system (Dell iDRAC10 Redfish API Guide)"),
            (DELL_MANAGER, {"Manufacturer": "Dell Inc."}, "iDRAC10 manager (captured)"),
            (DELL_SYSTEM + "/Bios", {"Attributes": dict(DELL_HTTP_DEVICE, BootMode="Uefi")},
             "Dell BIOS attribute registry HttpDev1*"),
        ),
        bios_apply="job", boot_in_settings_object=True, insert_slots=("1",),
        busy=(400, "IDRAC.2.8.SYS518", "iDRAC is not ready. The configuration values "
                                       "cannot be accessed. Retry the operation."),
    ),
    "supermicro-x11": Profile(
        # The captured payloads carry no @odata.etag and no capture shows an
        # ETag header: the mock gives none, and requires no If-Match. UsbCd:
        # openstack/sushy system constants.py (SuperMicro X11 and X12 boot
        # virtual media only as UsbCd). The captured system keeps the
        # operator's Continuous Hdd; its ResetActionInfo and Bios were not
        # captured and are not served.
        "supermicro-x11", etag_in="none", cd_boot_targets=("UsbCd",),
        target_change_drops_mode=True, insert_refuses=("Inserted", "WriteProtected"),
        eject_keeps_image_name=True,
        overlays=(
            ("/redfish/v1/Systems", {"Members": [{"@odata.id": SMC_SYSTEM}],
                                     "Members@odata.count": 1},
             "the captured service root links /redfish/v1/Systems and the captured "
             "manager's ManagerForServers names its one system, Systems/1; the "
             "collection itself was not captured"),
            (SMC_MANAGER + "/VirtualMedia", {
                "Name": "Virtual Media Collection",
                "Members": [{"@odata.id": SMC_MANAGER + "/VirtualMedia/CD1"}],
                "Members@odata.count": 1},
             "the captured manager (firmware 01.73.11) links Managers/1/VirtualMedia; "
             "Supermicro Redfish Reference Guide, virtual media: the ISO is checked and "
             "ejected at Managers/1/VirtualMedia/CD<n> (quoted in "
             "github.com/quadsproject/badfish/issues/125); community.general pull "
             "request 4839 inserts into CD1 on firmware 01.74.02"),
            (SMC_MANAGER + "/VirtualMedia/CD1", {
                "Id": "CD1", "Name": "Virtual Removable Media", "MediaTypes": ["CD", "DVD"],
                "Image": None, "ImageName": None, "Inserted": False,
                "ConnectedVia": "NotConnected",
                "Actions": media_actions(SMC_MANAGER + "/VirtualMedia/CD1")},
             "community.general pull request 4839 (firmware 01.74.02): InsertMedia at "
             "Managers/1/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia, found as a "
             "CD/DVD device; Supermicro Redfish Reference Guide: EjectMedia on CD<n> with "
             "the body {}; quadsproject/badfish pull request 126: CD1 named \"Virtual "
             "Removable Media\" with ImageName and Inserted"),
        )),
    "supermicro-x12": Profile(
        "supermicro-x12", etag_in="both", cd_boot_targets=("UsbCd",),
        target_change_drops_mode=True,
        overlays=(
            (SMC_MANAGER, {"Id": "1", "Manufacturer": "Supermicro", "Model": "X12",
                           "VirtualMedia": {"@odata.id": SMC_MANAGER + "/VirtualMedia"}},
             "Supermicro Redfish Reference Guide (X12): Managers/1"),
            (SMC_MANAGER + "/VirtualMedia", {"Members": [
                {"@odata.id": SMC_MANAGER + "/VirtualMedia/CD1"}]},
             "Supermicro Redfish Reference Guide (X12): VirtualMedia collection"),
            (SMC_MANAGER + "/VirtualMedia/CD1", {
                "Id": "CD1", "Name": "Virtual CD", "MediaTypes": ["CD", "DVD"],
                "Image": None, "Inserted": False,
                "Actions": media_actions(SMC_MANAGER + "/VirtualMedia/CD1")},
             "Supermicro Redfish Reference Guide (X12): VirtualMedia CD1 with "
             "InsertMedia/EjectMedia; shape as openstack/sushy json_samples/virtual_media.json "
             "(Name: required of every resource by DSP0266)"),
        )),
    "hpe-ilo5": Profile(
        "hpe-ilo5", etag_in="both", empty_post_415=True,
        overlays=(
            ("/redfish/v1/Systems", {"Members": [{"@odata.id": HPE_SYSTEM + "/"}],
                                     "Members@odata.count": 1},
             "HewlettPackard/ilo-rest-api-docs iLO 5 resource definitions, "
             "ComputerSystemCollection (one member, /redfish/v1/systems/1/); the "
             "captured samples leave the collection out"),
        ),
        # iLO answers a change during POST with this 400 (iLO message registry)
        busy=(400, "iLO.2.15.UnableToModifyDuringSystemPOST",
              "The value for the property cannot be changed while the server is in POST."),
    ),
    "lenovo-xcc": Profile("lenovo-xcc", if_match_required=True, etag_in="body",
                          media_patch=True),
    "dmtf-public-rackmount1": Profile("dmtf-public-rackmount1"),
}
