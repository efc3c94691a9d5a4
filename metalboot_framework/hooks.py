"""The pluggy plugin manager, the marker for hook implementations, and the calls.

Every hook is called through pluggy's dispatcher, so ``tryfirst``/``trylast``,
``wrapper=True`` implementations and pluggy's check of the call's arguments work
as pluggy documents them. pluggy stops a call at the first implementation that
raises; metalboot's hooks hear of changes already committed, and one broken
plugin must not silence the others (the webhook notifier among them), so
:data:`hookimpl` guards each function it marks: one that raises is logged and
counts as no answer, and the rest of the call goes on.
"""

import contextvars
import functools
import logging

import pluggy

from metalboot_framework import hookspecs

LOG = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "metalboot.hooks"

# pluggy returns a call's answers unnamed; during a call of a hook that wants
# them named (Hooks.veto_reasons), each guard of that hook records (itself, its
# arguments, its answer) here, which tells whose implementation gave the answer.
_ANSWERS = contextvars.ContextVar("metalboot_hook_answers", default=(None, None))


def _guarded(function, hook_name):
    @functools.wraps(function)
    def guarded(*args):
        try:
            answer = function(*args)
        except Exception:
            LOG.exception("hook %s of %s.%s failed; ignored", hook_name,
                          function.__module__, function.__qualname__)
            return None
        recording, recorded = _ANSWERS.get()
        if recording == hook_name and answer is not None:
            recorded.append((guarded, args, answer))
        return answer
    guarded.metalboot_guarded = True
    return guarded


def _gave(impl, guarded, args):
    """Whether ``impl`` is the guarded function called with ``args`` (a
    method's first argument is its plugin)."""
    owner = getattr(impl.function, "__self__", None)
    return (getattr(impl.function, "__func__", impl.function) is guarded
            and (owner is None or bool(args) and args[0] is owner))


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

        One pluggy call, so that wrappers run once, around every answer. The
        guard of each implementation records its answer, which names the plugin
        that gave it; an answer no guard recorded (an implementation not marked
        with :data:`hookimpl`, or a wrapper's) is named after the plugins that
        could have given it. A wrapper that raises leaves no reasons.
        """
        name = "metalboot_veto_machine"
        caller = getattr(self.pm.hook, name)
        impls = caller.get_hookimpls()
        recorded = []
        token = _ANSWERS.set((name, recorded))
        try:
            answers = caller(machine=machine, migration=migration)
        except pluggy.HookCallError:
            raise
        except Exception:
            LOG.exception("hook %s failed; ignored", name)
            return []
        finally:
            _ANSWERS.reset(token)
        unrecorded = "/".join(impl.plugin_name for impl in impls
                              if not getattr(impl.function, "metalboot_guarded", False))
        reasons = []
        for answer in answers:
            entry = next((entry for entry in recorded if entry[2] is answer), None)
            if entry is None:
                reasons.append((unrecorded, str(answer)))
                continue
            recorded.remove(entry)
            plugin = next((impl.plugin_name for impl in impls if _gave(impl, *entry[:2])),
                          unrecorded)
            reasons.append((plugin, str(answer)))
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
