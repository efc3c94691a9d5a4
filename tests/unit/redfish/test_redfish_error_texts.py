"""Errors that send the operator to the right manual: the vendor's own terms,
the BMC's address, and what happened (refused, timed out)."""

import socket

import pytest

from plugin_steps import HTTP, PASSWORD, VMEDIA, machine_on
from metalboot_framework.exceptions import BmcAuthError, BmcConnectionError, ValidationFailed


@pytest.mark.parametrize("vendor,names", [("supermicro-x11", "Supermicro"),
                                          ("supermicro-x12", "Supermicro"),
                                          ("lenovo-xcc", "Lenovo XCC")])
def test_http_url_refusal_names_only_the_vendors_own_terms(services, vendor_bmc, vendor,
                                                           names):
    bmc = vendor_bmc(vendor, uefi=True)
    task, iface = machine_on(services, bmc, HTTP)
    with pytest.raises(ValidationFailed) as exc:
        iface.validate(task)
    text = str(exc.value) + repr(exc.value.fields)
    assert names in text and "Boot.HttpBootUri" in text
    assert "HttpDev1" not in text and "Dell" not in text and "iDRAC" not in text


def test_dell_refusal_names_its_bios_attribute(services, vendor_bmc):
    bmc = vendor_bmc("dell-idrac9", uefi=True)
    del bmc.bios_attributes["HttpDev1Uri"]
    task, iface = machine_on(services, bmc, HTTP)
    with pytest.raises(ValidationFailed) as exc:
        iface.validate(task)
    assert "Dell iDRAC" in str(exc.value) and "HttpDev1Uri" in str(exc.value)


class SilentBmc:
    """Accepts TCP connections (the kernel completes them) and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"


def test_a_bmc_that_never_answers_is_a_time_out(services):
    bmc = SilentBmc()
    try:
        task, iface = machine_on(lambda: services(read_timeout=0.5, retry_attempts=2),
                                 bmc, VMEDIA)
        with pytest.raises(BmcConnectionError) as exc:
            iface.validate(task)
    finally:
        bmc.sock.close()
    text = str(exc.value)
    assert "timed out after 0.5 seconds" in text and bmc.url in text, text
    assert "accepted the connection" in text and "Unable to connect" not in text


def test_refused_credentials_name_address_vendor_and_product(services, vendor_bmc):
    bmc = vendor_bmc("dell-idrac9", uefi=True, password="not-" + PASSWORD)
    task, iface = machine_on(services, bmc, HTTP)
    with pytest.raises(BmcAuthError) as exc:
        iface.validate(task)
    text = str(exc.value)
    assert bmc.url in text and "HTTP 401" in text
    assert "Dell Integrated Dell Remote Access Controller" in text, text
    assert PASSWORD not in text
