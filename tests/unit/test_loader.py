"""Enabled boot interfaces load by name; anything wrong stops with one line."""

import pytest

from metalboot_framework.exceptions import PluginLoadError
from metalboot_framework.loader import BootInterfaces


def test_loads_enabled_by_name():
    interfaces = BootInterfaces(["fake"], "fake")
    assert interfaces.names() == ["fake"]
    assert interfaces.get("fake").name == "fake"
    assert interfaces.default == "fake"


def test_unknown_name_is_named():
    with pytest.raises(PluginLoadError) as exc:
        BootInterfaces(["fake", "no-such-interface"], "fake")
    assert "no-such-interface" in str(exc.value)
    assert "not installed" in str(exc.value)


def test_default_must_be_enabled():
    with pytest.raises(PluginLoadError, match="default_boot_interface 'pxe'"):
        BootInterfaces(["fake"], "pxe")


def test_empty_is_refused():
    with pytest.raises(PluginLoadError, match="empty"):
        BootInterfaces([], "fake")
