"""The pluggy plugin manager and safe calling of hooks."""

import logging

import pluggy

from metalboot_framework import hookspecs

LOG = logging.getLogger(__name__)

hookimpl = pluggy.HookimplMarker("metalboot")

ENTRY_POINT_GROUP = "metalboot.hooks"


def make_plugin_manager(disabled=()):
    """Create a plugin manager with every installed ``metalboot.hooks`` plugin."""
    pm = pluggy.PluginManager("metalboot")
    pm.add_hookspecs(hookspecs)
    for name in disabled:
        pm.set_blocked(name)
    pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for name, plugin in pm.list_name_plugin():
        LOG.info("registered hook plugin %s (%s)", name, plugin)
    return pm


class Hooks:
    """Calls hooks so that a failing implementation never breaks the caller."""

    def __init__(self, pm):
        self.pm = pm

    def notify(self, hook_name, **kwargs):
        """Call every implementation of a notification hook; log failures."""
        hook = getattr(self.pm.hook, hook_name)
        for impl in reversed(hook.get_hookimpls()):
            try:
                impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception:
                LOG.exception("hook %s of plugin %s failed; ignored",
                              hook_name, impl.plugin_name)

    def has(self, hook_name):
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    def collect(self, hook_name, **kwargs):
        """Call every implementation and return their non-None answers.

        A failing implementation is logged and counts as no answer.
        """
        answers = []
        hook = getattr(self.pm.hook, hook_name)
        for impl in reversed(hook.get_hookimpls()):
            try:
                answer = impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception:
                LOG.exception("hook %s of plugin %s failed; ignored",
                              hook_name, impl.plugin_name)
                continue
            if answer is not None:
                answers.append((impl.plugin_name, answer))
        return answers
