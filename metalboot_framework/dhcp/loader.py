"""Loads DHCP backends by name from the ``metalboot.dhcp_backends`` namespace.

A site adds its own backend (another DHCP server, an IPAM) by subclassing
:class:`~metalboot_framework.dhcp.base.DhcpBackend` in any installed
distribution and declaring it under that entry-point namespace. Each backend is
loaded once per process and configuration object, and shared by all threads.
"""

import logging
import threading

from stevedore import driver
from stevedore.exception import NoMatches

from metalboot_framework import metrics
from metalboot_framework.dhcp.base import DhcpBackend
from metalboot_framework.exceptions import PluginLoadError

LOG = logging.getLogger(__name__)

NAMESPACE = "metalboot.dhcp_backends"

_CACHE = {}
_LOCK = threading.Lock()


def get_backend(name, conf=None):
    """The backend registered as ``name``, constructed with ``conf`` (default CONF).

    Raises :class:`~metalboot_framework.exceptions.PluginLoadError` naming the
    backend when it is not installed, fails to import or to construct, or is
    not a :class:`DhcpBackend`.
    """
    if conf is None:
        from metalboot_framework.conf import CONF as conf
    key = (name, id(conf))
    with _LOCK:
        backend = _CACHE.get(key)
        if backend is not None and backend.conf is conf:
            return backend
        try:
            manager = driver.DriverManager(NAMESPACE, name, invoke_on_load=True,
                                           invoke_args=(conf,))
        except NoMatches:
            raise PluginLoadError(f"DHCP backend {name!r} is not installed (no entry point "
                                  f"in namespace {NAMESPACE})")
        except Exception as exc:
            raise PluginLoadError(f"DHCP backend {name!r} failed to load: "
                                  f"{type(exc).__name__}: {exc}")
        backend = manager.driver
        if not isinstance(backend, DhcpBackend):
            where = manager.extensions[0].entry_point.value
            raise PluginLoadError(f"DHCP backend {name!r} ({where}) is not a DhcpBackend "
                                  f"subclass")
        backend.name = name
        metrics.instrument_dhcp_backend(backend)  # call latency and errors
        _CACHE[key] = backend
        LOG.info("loaded DHCP backend %s from %s", name,
                 manager.extensions[0].entry_point.value)
        return backend


def clear_cache():
    """Forget every loaded backend (for tests)."""
    with _LOCK:
        _CACHE.clear()
