"""Fixtures for the Redfish unit tests; the mock BMC lives in redfish_mock_bmc.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from redfish_mock_bmc import (  # noqa: E402,F401
    _fresh_bmc_connection_cache, mock_redfish_bmc, vendor_bmc)
from plugin_steps import services  # noqa: E402,F401
