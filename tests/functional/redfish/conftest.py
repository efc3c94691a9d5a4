"""Fixtures for the Redfish functional tests; see redfish_emulator_harness.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from redfish_emulator_harness import (_fresh_bmc_connection_cache,  # noqa: E402,F401
                                      fault_injecting_proxy, partition_artifact_server,
                                      redfish_services, sushy_emulator_with_http_boot_uri)
