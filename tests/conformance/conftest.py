"""Fixtures of the conformance tests: reused from the functional harnesses, not copied.

- ``tests/functional/redfish``: sushy-emulator processes
  (``sushy_emulator_with_http_boot_uri``), the harness's Services
  (``redfish_services``) and the artifact server BMCs download ISOs from;
- ``tests/unit/redfish``: the vendor mock BMC serving real vendor payloads
  (``vendor_bmc``);
- ``tests/functional/dhcp``: network namespaces with a running dnsmasq and
  Kea (``net``, ``dnsmasq``, ``kea``; root only, skipped otherwise).
"""

import os
import sys

REDFISH_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "functional", "redfish")
REDFISH_UNIT_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "unit", "redfish")
for folder in (REDFISH_TESTS, REDFISH_UNIT_TESTS):
    if folder not in sys.path:
        sys.path.insert(0, folder)

from redfish_emulator_harness import (_fresh_bmc_connection_cache,  # noqa: E402,F401
                                      partition_artifact_server, redfish_services,
                                      sushy_emulator_with_http_boot_uri)
from redfish_mock_bmc import vendor_bmc  # noqa: E402,F401
from tests.functional.dhcp.conftest import dnsmasq, kea, net  # noqa: E402,F401
