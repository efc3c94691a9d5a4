"""The per-machine state machine of a migration, as one table.

Every move of a machine within a migration is a row of :data:`TRANSITIONS`:
where it starts, the event that moves it, where it ends, which plugin step (of
which interface) produced the event, how the move is committed and whether the
step may run again after a crash. The step runner refuses a move that is not in
the table (:func:`check`), and makes the plugin call and the commit of each
move forward as its row says (:data:`FORWARD_MOVES`, :func:`plugin_call`); the
API, the CLI, the boot server and the docs take their lists of steps from
here; the architecture page's diagram is generated from the table.

This module imports nothing of the framework, so that anything may import it.
"""

import dataclasses
import enum


class Step(str, enum.Enum):
    """Where a machine is in a migration (``migration_machines.state``)."""

    QUEUED = "queued"
    VALIDATING = "validating"
    PREPARING = "preparing"
    ACTIVATING = "activating"
    AWAITING_BOOT = "awaiting_boot"
    VERIFYING = "verifying"
    DONE = "done"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    ROLLBACK_FAILED = "rollback_failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    VALID = "valid"
    INVALID = "invalid"

    def __str__(self):
        return self.value


class Commit(str, enum.Enum):
    """How the runner commits a move."""

    #: the machine's coroutine waits for the commit before it goes on
    WAITED = "waited"
    #: queued while the next step already runs: a crash before the commit only
    #: runs a harmless step again (the step's "rerun" column says why)
    QUEUED = "queued"
    #: committed by the scheduler, not the machine's coroutine
    SCHEDULER = "scheduler"


@dataclasses.dataclass(frozen=True)
class Transition:
    """One row of the table."""

    old: Step
    event: str
    new: Step
    #: the plugin steps that ran in ``old`` and produced the event ("" if none):
    #: "target.validate", "source.clean_up", ...
    calls: str
    commit: Commit
    #: after a crash before the move is committed the machine is found in
    #: ``old`` again: what happens then, and why it is harmless
    rerun: str


S, C = Step, Commit

TRANSITIONS = (
    Transition(S.QUEUED, "started (a slot is free, admission lets it)", S.VALIDATING, "",
               C.SCHEDULER, "not started: still queued"),
    Transition(S.QUEUED, "migration cancelled or halted", S.CANCELLED, "", C.SCHEDULER,
               "still queued: cancelled again"),
    Transition(S.VALIDATING, "validated", S.PREPARING, "target.validate", C.QUEUED,
               "validated again: validate changes nothing"),
    Transition(S.VALIDATING, "validate failed", S.ROLLED_BACK, "target.validate", C.WAITED,
               "validated again; a machine resumed here goes to rolling_back instead"),
    Transition(S.VALIDATING, "vetoed by a hook", S.SKIPPED, "", C.WAITED,
               "asked again; resumed, it goes to rolling_back instead"),
    Transition(S.VALIDATING, "validate failed or vetoed after a resume, or cancelled",
               S.ROLLING_BACK, "target.validate", C.WAITED,
               "prepare may have run before the crash: rolled back"),
    Transition(S.VALIDATING, "dry run: validate passed", S.VALID, "target.validate",
               C.WAITED, "validated again"),
    Transition(S.VALIDATING, "dry run: validate failed", S.INVALID, "target.validate",
               C.WAITED, "validated again"),
    Transition(S.PREPARING, "prepared", S.ACTIVATING, "target.prepare", C.QUEUED,
               "prepared and activated again (prepare is idempotent); a rollback "
               "treats it as activated"),
    Transition(S.PREPARING, "prepare failed or cancelled", S.ROLLING_BACK, "target.prepare",
               C.WAITED, "prepared again"),
    Transition(S.ACTIVATING, "activated", S.AWAITING_BOOT, "target.activate", C.QUEUED,
               "activated again; evidence counts from activated_at, written before"),
    Transition(S.ACTIVATING, "activate failed or cancelled", S.ROLLING_BACK,
               "target.activate", C.WAITED, "activated again"),
    Transition(S.AWAITING_BOOT, "its own artifact fetched or boot report posted",
               S.VERIFYING, "", C.QUEUED,
               "awaits its boot again and finds the same evidence"),
    Transition(S.AWAITING_BOOT, "no evidence before the deadline, or cancelled",
               S.ROLLING_BACK, "", C.WAITED, "awaits its boot again until the deadline"),
    Transition(S.VERIFYING, "source cleaned up", S.DONE, "source.clean_up", C.WAITED,
               "cleaned up again: clean_up is idempotent"),
    Transition(S.VERIFYING, "clean_up failed or cancelled", S.ROLLING_BACK, "source.clean_up",
               C.WAITED, "cleaned up again"),
    Transition(S.ROLLING_BACK, "rolled back", S.ROLLED_BACK,
               "target.clean_up, then source.prepare and source.activate if activated",
               C.WAITED, "rolled back again: each call is idempotent"),
    Transition(S.ROLLING_BACK, "a rollback call failed", S.ROLLBACK_FAILED,
               "target.clean_up, source.prepare, source.activate", C.WAITED,
               "rolled back again"),
)

del S, C

#: the legal (old, new) pairs
_LEGAL = frozenset((t.old.value, t.new.value) for t in TRANSITIONS)


class IllegalTransition(ValueError):
    """A move that the table does not have: a bug in the framework."""


def check(old, new):
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in the table."""
    if (old, new) not in _LEGAL:
        raise IllegalTransition(f"{old} -> {new} is not a migration step's move")


#: every step, in the order a person reads them
ALL = tuple(s.value for s in (
    Step.QUEUED, Step.VALIDATING, Step.PREPARING, Step.ACTIVATING, Step.AWAITING_BOOT,
    Step.VERIFYING, Step.DONE, Step.VALID, Step.SKIPPED, Step.ROLLING_BACK, Step.ROLLED_BACK,
    Step.ROLLBACK_FAILED, Step.INVALID, Step.CANCELLED))
#: work under way: the machine belongs to a live migration
IN_FLIGHT = tuple(s.value for s in (Step.VALIDATING, Step.PREPARING, Step.ACTIVATING,
                                    Step.AWAITING_BOOT, Step.VERIFYING, Step.ROLLING_BACK))
#: work under way or still to start
ACTIVE = (Step.QUEUED.value,) + IN_FLIGHT
#: steps whose coroutine calls a plugin (all of IN_FLIGHT but awaiting_boot)
RUNNABLE = tuple(s for s in IN_FLIGHT if s != Step.AWAITING_BOOT.value)
#: steps in which a machine migrating to an interface may fetch by MAC
BOOTING = (Step.ACTIVATING.value, Step.AWAITING_BOOT.value, Step.VERIFYING.value)
#: ends that count as success
SUCCEEDED = (Step.DONE.value, Step.VALID.value)
#: ends that count as failure (against max_failures)
FAILED = (Step.ROLLED_BACK.value, Step.ROLLBACK_FAILED.value, Step.INVALID.value)
#: ends: nothing will change any more
FINISHED = SUCCEEDED + FAILED + (Step.SKIPPED.value, Step.CANCELLED.value)
#: ends with the machine back at rest on its source
AT_REST = (Step.ROLLED_BACK.value, Step.SKIPPED.value, Step.CANCELLED.value)
#: ends whose slot the same coroutine fills at once with the next queued machine
REFILLING = (Step.DONE.value, Step.VALID.value, Step.SKIPPED.value)

#: the move forward from each working step but rolling_back: its Transition
FORWARD_MOVES = {t.old.value: t for t in TRANSITIONS
                 if t.old.value in RUNNABLE and t.new.value in IN_FLIGHT + (Step.DONE.value,)
                 and t.new != Step.ROLLING_BACK}


def plugin_call(move):
    """(``"source"`` or ``"target"``, plugin step) of a move with a single
    plugin call in its ``calls`` ("target.validate"): what the runner calls."""
    role, _, step = move.calls.partition(".")
    if role not in ("source", "target") or not step.isidentifier():
        raise ValueError(f"{move.old} -> {move.new}: not one plugin call: {move.calls!r}")
    return role, step


def rst_table():
    """The table as reStructuredText (the architecture page includes it)."""
    rows = [("from", "event", "to", "plugin calls", "commit", "after a crash")]
    rows += [(f"``{t.old}``", t.event, f"``{t.new}``", t.calls or "--", t.commit.value, t.rerun)
             for t in TRANSITIONS]
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in rows:
        lines.append("   * - " + row[0])
        lines += [f"     - {cell}" for cell in row[1:]]
    return "\n".join(lines) + "\n"


def dot():
    """The state diagram in Graphviz's language, edges from the table."""
    finished = set(FINISHED)
    lines = ["digraph migration_machine {", "    rankdir=TB;",
             '    node [shape=box, style=rounded, fontname="sans-serif", fontsize=10];',
             '    edge [fontname="sans-serif", fontsize=8];']
    lines += [f'    {s} [peripheries=2];' for s in ALL if s in finished]
    for t in TRANSITIONS:
        style = ", style=dashed" if t.new.value in (Step.ROLLING_BACK.value,) + FAILED else ""
        lines.append(f'    {t.old.value} -> {t.new.value} [label="{t.event}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
