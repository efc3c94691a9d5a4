"""The vendor support matrix page agrees with the quirk table."""

import os
import re

from metalboot_framework.bmc import quirks

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "doc", "boot-interfaces",
                    "vendors.rst")


def rows():
    """{vendor: [row text, ...]} of the page's list-table."""
    with open(PAGE) as f:
        text = f.read()
    found = {}
    for row in re.split(r"\n   \* - ", text.split(":widths:", 1)[1])[2:]:
        vendor, _, rest = row.partition("\n")
        found.setdefault(vendor.strip(), []).append(rest)
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
