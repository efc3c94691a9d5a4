"""The pluggy plugin manager, the marker for hook implementations, and the calls.

Every hook is called through pluggy's dispatcher, so ``tryfirst``/``trylast``,
``wrapper=True`` implementations and pluggy's check of the call's arguments work
as pluggy documents them. pluggy stops a call at the first implementation that
raises; metalboot's hooks hear of changes already committed, and one broken
plugin must not silence the others (the webhook notifier among them), so
:data:`hookimpl` guards each function it marks: one that raises is logged and
counts as no answer, and the rest of the call goes on.
"""

import functools
import logging

import pluggy

from metalboot_framework import hookspecs

LOG = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "metalboot.hooks"


def _guarded(function, hook_name):
    @functools.wraps(function)
    def guarded(*args):
        try:
            return function(*args)
        except Exception:
            LOG.exception("hook %s of %s.%s failed; ignored", hook_name,
                          function.__module__, function.__qualname__)
            return None
    return guarded


class HookimplMarker(pluggy.HookimplMarker):
    """pluggy's marker that also guards the functions it marks (not wrappers:
    a wrapper sees the others' results and exceptions, and answers for itself)."""

    def __call__(self, function=None, **opts):
        if function is None:
            return lambda f: self(f, **opts)
        if not (opts.get("wrapper") or opts.get("hookwrapper")):
            function = _guarded(function, opts.get("specname") or function.__name__)
        return super().__call__(function, **opts)


#: Mark a hook implementation: ``@hookimpl``, or ``@hookimpl(tryfirst=True)``,
#: ``@hookimpl(wrapper=True)`` and the other options of pluggy's marker.
hookimpl = HookimplMarker("metalboot")


class BootScript:
    """The boot script that :func:`~metalboot_framework.hookspecs.metalboot_amend_boot_script`
    implementations amend in turn: each reads ``text`` as amended so far and may
    set a new one."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return f"BootScript({self.text!r})"


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
    """The calls the framework makes; none lets a plugin's failure reach the caller.

    A missing argument is the framework's mistake, not a plugin's: pluggy's
    ``HookCallError`` is raised, never logged away.
    """

    def __init__(self, pm):
        self.pm = pm

    def has(self, hook_name):
        """Whether any implementation is registered (to skip building arguments)."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    def notify(self, hook_name, **kwargs):
        """Call a notification hook; what escapes the guards (a wrapper's or an
        unguarded implementation's exception) is logged."""
        try:
            getattr(self.pm.hook, hook_name)(**kwargs)
        except pluggy.HookCallError:
            raise
        except Exception:
            LOG.exception("hook %s failed; ignored", hook_name)

    def veto_reasons(self, machine, migration):
        """[(plugin name, reason)] of every plugin that vetoes, in pluggy's order.

        Each plugin is asked through a pluggy caller of its own (its wrappers and
        the others' run around it), so that a reason names who gave it.
        """
        name = "metalboot_veto_machine"
        answering = [impl for impl in reversed(getattr(self.pm.hook, name).get_hookimpls())
                     if not (impl.wrapper or impl.hookwrapper)]
        reasons = []
        for impl in answering:
            others = [other.plugin for other in answering if other.plugin is not impl.plugin]
            caller = self.pm.subset_hook_caller(name, remove_plugins=others)
            try:
                answers = caller(machine=machine, migration=migration)
            except pluggy.HookCallError:
                raise
            except Exception:
                LOG.exception("hook %s of plugin %s failed; ignored", name, impl.plugin_name)
                continue
            reasons.extend((impl.plugin_name, str(reason)) for reason in answers)
        return reasons

    def amend_boot_script(self, text, **kwargs):
        """Fold ``text`` through every amending implementation, in pluggy's order.

        A result that is not a string is refused (logged) and the rendered
        ``text`` is served unamended.
        """
        script = BootScript(text)
        try:
            answers = self.pm.hook.metalboot_amend_boot_script(script=script, **kwargs)
        except pluggy.HookCallError:
            raise
        except Exception:
            LOG.exception("hook metalboot_amend_boot_script failed; script not amended")
            return text
        if answers:
            LOG.warning("hook metalboot_amend_boot_script: %d implementation(s) returned a "
                        "value, which is ignored: amend by setting script.text", len(answers))
        if not isinstance(script.text, str):
            LOG.error("hook metalboot_amend_boot_script set script.text to %s, not a string; "
                      "script not amended", type(script.text).__name__)
            return text
        return script.text
