"""Fixtures for the Redfish functional tests; see redfish_emulator_harness.py."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the vendor mock BMC of the unit tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "unit", "redfish"))

from redfish_emulator_harness import (_fresh_bmc_connection_cache,  # noqa: E402,F401
                                      fault_injecting_proxy, partition_artifact_server,
                                      redfish_services, sushy_emulator_with_http_boot_uri)
from redfish_mock_bmc import vendor_bmc  # noqa: E402,F401
