"""Loads the enabled boot interfaces by name through stevedore.

Only names listed in ``[DEFAULT] enabled_boot_interfaces`` are imported. A name
with no entry point, a plugin that fails to import or to construct, or a
default that is not enabled raises :class:`PluginLoadError` with one line that
names it, so that the server stops at start rather than half-working.
"""

import logging

from stevedore import named

from metalboot_framework.boot_interface import BootInterface
from metalboot_framework.exceptions import InvalidInput, NotFound, PluginLoadError

LOG = logging.getLogger(__name__)

NAMESPACE = "metalboot.boot_interfaces"


class BootInterfaces:
    """The enabled boot interfaces of this process, by name."""

    def __init__(self, enabled, default):
        self._by_name = _load(enabled)
        if default not in self._by_name:
            raise PluginLoadError(
                f"default_boot_interface {default!r} is not in enabled_boot_interfaces "
                f"({', '.join(enabled) or 'empty'})")
        self.default = default

    def names(self):
        return list(self._by_name)

    def get(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise NotFound(f"boot interface {name!r} is not enabled "
                           f"(enabled: {', '.join(self._by_name)})",
                           fields={"boot_interface": ["not an enabled boot interface"]})

    def require(self, name):
        """The interface a request names: InvalidInput (422, naming the field
        ``boot_interface``) unless it is enabled."""
        if name not in self._by_name:
            raise InvalidInput(f"{name} is not an enabled boot interface "
                               f"(enabled: {', '.join(self._by_name)})",
                               fields={"boot_interface": ["not an enabled boot interface"]})
        return self._by_name[name]

    def __contains__(self, name):
        return name in self._by_name

    def __iter__(self):
        return iter(self._by_name.values())


def _load(enabled):
    if not enabled:
        raise PluginLoadError("enabled_boot_interfaces is empty")
    failures = []

    def on_load_failure(manager, entrypoint, exc):
        failures.append(f"boot interface {entrypoint.name!r} ({entrypoint.value}) "
                        f"failed to load: {type(exc).__name__}: {exc}")

    def on_missing(names):
        failures.append(
            f"boot interface(s) {', '.join(sorted(names))} enabled but not installed "
            f"(no entry point in namespace {NAMESPACE})")

    manager = named.NamedExtensionManager(
        NAMESPACE, names=list(enabled), invoke_on_load=True,
        on_load_failure_callback=on_load_failure,
        on_missing_entrypoints_callback=on_missing,
        name_order=True)
    if failures:
        raise PluginLoadError("; ".join(failures))
    by_name = {}
    for ext in manager:
        if not isinstance(ext.obj, BootInterface):
            raise PluginLoadError(
                f"boot interface {ext.name!r} ({ext.entry_point.value}) is not a "
                f"BootInterface subclass")
        ext.obj.name = ext.name
        by_name[ext.name] = ext.obj
        LOG.info("loaded boot interface %s from %s", ext.name, ext.entry_point.value)
    return by_name
