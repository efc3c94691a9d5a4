"""The vendor support matrix page agrees with the quirk table."""

import os
import re

import pytest

from plugin_steps import machine_on
from metalboot_framework.bmc import quirks
from metalboot_framework.exceptions import ValidationFailed

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "doc", "boot-interfaces",
                    "vendors.rst")


COLUMNS = ("Vendor", "Firmware", "Interface", "How the URL or media is set",
           "Restored on clean-up", "Known limits", "Sources (firmware seen on)")


def cells():
    """[{column: cell text}] of the page's list-table, one per row."""
    with open(PAGE) as f:
        text = f.read()
    table = []
    for row in re.split(r"\n   \* - ", text.split(":widths:", 1)[1])[1:]:
        values = [" ".join(v.split()) for v in re.split(r"\n     - ", row)]
        table.append(dict(zip(COLUMNS, values, strict=True)))
    assert tuple(table[0].values()) == COLUMNS  # the header row
    return table[1:]


def rows():
    """{vendor: [row text, ...]} of the page's list-table."""
    found = {}
    for row in cells():
        found.setdefault(row["Vendor"], []).append(
            " ".join(v for k, v in row.items() if k != "Vendor"))
    return found


def test_every_quirk_table_vendor_has_a_row_and_every_row_a_vendor():
    table = {q.vendor for _m, _model, q in quirks.TABLE} | {quirks.GENERIC.vendor}
    assert set(rows()) == table


def test_every_quirk_table_row_names_its_source():
    for _m, _model, q in quirks.TABLE:
        assert q.source, q.name
    assert all(b.source for b in quirks.BUSY_REFUSALS)


def test_the_page_names_what_the_quirks_set():
    page = rows()
    for _m, _model, q in quirks.TABLE:
        text = " ".join(page[q.vendor])
        for value in (q.http_boot_uri_bios_attribute, q.http_boot_enable_bios_attribute,
                      q.http_boot_protocol_bios_attribute, q.virtual_media_target):
            if value:
                assert value in text, (q.vendor, value)
        if q.bios_config_job:
            assert "config job" in text and "SettingsApplyTime" in text
        for slot in q.virtual_media_newer_models_slots or ():
            assert f"slot {slot} first" in text, (q.vendor, slot)
        if q.virtual_media_firmware:
            first, last = q.virtual_media_firmware
            assert f"{first}.x-{last}.x" in text
        if q.full_boot_request:
            assert "together" in text or "As AMI MegaRAC" in text


#: How a cell names a public source: a repository (owner/name), an upstream
#: issue (#n), a DMTF document or mockup, or a vendor's document in quotes.
SOURCE_RE = re.compile(r"[\w.-]+/[\w.-]+|#\d+|\bDSP\d{4}\b|DMTF|\"[^\"]+\"")
#: A firmware version (1.20.50.52, 01.73.11, v1.15, TEE142M-2.41) or a
#: statement that the source gives none.
VERSION_RE = re.compile(r"\b\d+\.\d+(\.\d+)*\b|v\d+\.\d+|no firmware version given")


def test_every_row_names_its_sources_and_the_firmware_seen_on():
    for row in cells():
        sources = row.get("Sources (firmware seen on)", "")
        assert SOURCE_RE.search(sources), row
        assert VERSION_RE.search(sources), row


def test_the_lenovo_row_cites_the_if_match_issue():
    [lenovo] = rows()["Lenovo XCC"]
    assert "ansible/ansible#56050" in lenovo and "If-Match" in lenovo
    assert "ansible/ansible#56050" in quirks.quirks_for("Lenovo").source


@pytest.mark.parametrize("interface", ["redfish-http-url", "redfish-virtual-media-ipxe"])
def test_the_dell_firmware_range_is_the_one_validate_accepts(services, vendor_bmc,
                                                            interface):
    """An iDRAC9 below the virtual media range (5.10): the row of each
    interface says 6.x-7.x exactly where validate refuses it."""
    [row] = [r for r in cells() if r["Vendor"] == "Dell iDRAC"
             and r["Interface"] == f"``{interface}``"]
    bmc = vendor_bmc("dell-idrac9", uefi=True)
    bmc.docs["/redfish/v1/Managers/iDRAC.Embedded.1"].update(
        FirmwareVersion="5.10.50.00", Model="14G Monolithic")
    task, iface = machine_on(services, bmc, interface)
    try:
        iface.validate(task)
        accepted = True
    except ValidationFailed as exc:
        assert "Manager.FirmwareVersion" in exc.fields, exc
        accepted = False
    assert ("6.x-7.x" in row["Firmware"]) is not accepted, row["Firmware"]
    assert ("5.10.50.00" in row["Firmware"] + row["Known limits"]), row
