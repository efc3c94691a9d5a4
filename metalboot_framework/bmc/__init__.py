"""Talking to BMCs over Redfish: one place for retries, timeouts and vendor quirks.

- :mod:`.connection`: one sushy connection per BMC (address + username), reused
  from a thread-safe cache.
- :mod:`.retry`: tenacity retries (connection errors and 5xx, never 4xx) and the
  translation of sushy errors into :class:`~metalboot_framework.exceptions.BmcError`
  messages that name the BMC, the system and the Redfish property or action.
- :mod:`.quirks`: the vendor-quirk table, keyed on Manufacturer/Model.
- :mod:`.client`: :class:`BmcClient`, boot override and HTTP boot URI.
- :mod:`.power`: power on/off/reset, polling until the BMC shows the new state.
- :mod:`.media`: virtual media insert/eject.
- :mod:`.redact`: keeps BMC passwords out of messages and logs.

Plugins get a client with :func:`client_for_task`.
"""

import sushy.auth  # noqa: F401  (so that its loggers exist for the filter below)
import sushy.resources.manager.virtual_media  # noqa: F401
import sushy.resources.system.system  # noqa: F401

from metalboot_framework.bmc import media, power, redact  # noqa: F401
from metalboot_framework.bmc.client import BmcClient, BootState, client_for_task  # noqa: F401
from metalboot_framework.bmc.quirks import Quirks, quirks_for  # noqa: F401

redact.install_log_filter("sushy", "metalboot_framework.bmc")
