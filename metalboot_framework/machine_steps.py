"""The per-machine state machine of a migration, as one table.

Every event a machine can meet in a step of a migration is a row of
:data:`TRANSITIONS`: the step it is in, the event (:class:`Event`), the step it
moves to, which plugin step (of which interface) produced the event, how the
move is committed, what is written with it (:class:`Write`), whether the
machine's lock is kept, and what happens if the conductor dies before the
move is committed. The step runner asks the table (:func:`on`) what an event
means and does what the row says; what a machine does in each step it runs is
:data:`WORK`. The API, the CLI, the boot server and the docs take their lists
of steps from here; the architecture page's diagram and table are generated
from the table.

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


class Event(str, enum.Enum):
    """What happens to a machine in a step."""

    STARTED = "started"  # a slot is free and admission lets the machine start
    CANCELLED = "cancelled"  # the migration is being cancelled
    HALTED = "halted"  # the migration halts (a failed canary, its budget spent)
    VALIDATED = "validated"  # the target's validate passed
    PREPARED = "prepared"  # the target's prepare passed
    ACTIVATED = "activated"  # the target's activate passed
    EVIDENCE = "evidence"  # the target recognised the machine's boot
    BOOT_TIMEOUT = "boot_timeout"  # no evidence by the deadline
    CLEANED_UP = "cleaned_up"  # the source's clean_up passed
    STEP_FAILED = "step_failed"  # the step's plugin call failed
    VETOED = "vetoed"  # a hook vetoed the machine
    DRY_RUN_VALID = "dry_run_valid"  # a dry run's validate passed
    DRY_RUN_INVALID = "dry_run_invalid"  # a dry run's validate failed
    ROLLED_BACK = "rolled_back"  # every call of the rollback passed
    ROLLBACK_FAILED = "rollback_failed"  # a call of the rollback failed

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


class Lock(str, enum.Enum):
    """What becomes of the machine's lock with the move."""

    #: taken in the transaction of the move (the scheduler starts the machine)
    TAKEN = "taken"
    #: kept: the machine's coroutine goes on with the next step
    KEPT = "kept"
    #: released in the transaction of the move: the machine's work has ended
    RELEASED = "released"
    #: nobody holds it (a queued machine)
    NOT_HELD = "not held"


class Write(str, enum.Enum):
    """What is written with a move besides its step, reason and error, in the
    order it is written."""

    #: started_at, and the first attempt
    STARTED = "started_at"
    #: activated_at (evidence counts from then; a rollback resets the machine
    #: onto its source), unless the machine has one
    ACTIVATED_AT = "activated_at"
    #: the deadline of the boot: now + the migration's boot_timeout
    DEADLINE = "deadline"
    #: the evidence the machine was recognised by
    EVIDENCE = "evidence_id"
    #: finished_at
    FINISHED = "finished_at"
    #: the machine boots through the target now: its boot interface, ready,
    #: and its lock released in the same statement
    SWITCH = "switch interface"
    #: the machine is prepared for its source again
    SOURCE_PREPARED = "source prepared"
    #: the machine is at rest again: ready if prepared for its interface, else
    #: enrolling
    AT_REST = "at rest"
    #: the machine is in error, for an operator
    MACHINE_ERROR = "machine error"
    #: a skipped canary's place goes to the first queued machine that is not one
    REPLACE_CANARY = "replace canary"


@dataclasses.dataclass(frozen=True)
class Transition:
    """One row of the table."""

    old: Step
    on: Event
    new: Step
    #: the event in words, for the docs and the table
    event: str
    #: the plugin steps that ran in ``old`` and produced the event ("" if none):
    #: "target.validate", "source.clean_up", ...
    calls: str
    commit: Commit
    lock: Lock
    writes: tuple
    #: after a crash before the move is committed the machine is found in
    #: ``old`` again: what happens then, and why it is harmless
    rerun: str
    #: the row of a machine taken over from a conductor that died in ``old``
    #: (where it differs from the machine's own)
    taken_over: bool = False

    @property
    def refills(self):
        """Whether the slot the move frees starts the next queued machine at once."""
        return self.new.value in REFILLING


S, E, C, L, W = Step, Event, Commit, Lock, Write
_ENDED = (W.FINISHED,)
_AT_REST = (W.FINISHED, W.AT_REST)


def _rolls_back(old, calls, rerun):
    """The rows of ``old``'s failure and cancellation: to rolling_back."""
    return tuple(Transition(old, event, Step.ROLLING_BACK, words, calls, Commit.WAITED,
                            Lock.KEPT, (), rerun)
                 for event, words in ((Event.STEP_FAILED, f"{calls.partition('.')[2]} failed"),
                                      (Event.CANCELLED, "migration cancelled")))


TRANSITIONS = (
    Transition(S.QUEUED, E.STARTED, S.VALIDATING, "started (a slot is free, admission lets it)",
               "", C.SCHEDULER, L.TAKEN, (W.STARTED,), "not started: still queued"),
    Transition(S.QUEUED, E.CANCELLED, S.CANCELLED, "migration cancelled", "", C.SCHEDULER,
               L.NOT_HELD, _AT_REST, "still queued: cancelled again"),
    Transition(S.QUEUED, E.HALTED, S.CANCELLED, "migration halted", "", C.SCHEDULER,
               L.NOT_HELD, _AT_REST, "still queued: cancelled again"),
    Transition(S.VALIDATING, E.VALIDATED, S.PREPARING, "validated", "target.validate",
               C.QUEUED, L.KEPT, (), "validated again: validate changes nothing"),
    Transition(S.VALIDATING, E.STEP_FAILED, S.ROLLED_BACK, "validate failed", "target.validate",
               C.WAITED, L.RELEASED, _AT_REST,
               "validated again (validate changes nothing: nothing to roll back)"),
    Transition(S.VALIDATING, E.VETOED, S.SKIPPED, "vetoed by a hook", "", C.WAITED,
               L.RELEASED, _AT_REST + (W.REPLACE_CANARY,), "asked again"),
    Transition(S.VALIDATING, E.STEP_FAILED, S.ROLLING_BACK, "validate failed after a takeover",
               "target.validate", C.WAITED, L.KEPT, (),
               "prepare may have run before the crash: rolled back", taken_over=True),
    Transition(S.VALIDATING, E.VETOED, S.ROLLING_BACK, "vetoed after a takeover", "",
               C.WAITED, L.KEPT, (), "prepare may have run before the crash: rolled back",
               taken_over=True),
    Transition(S.VALIDATING, E.CANCELLED, S.ROLLING_BACK, "migration cancelled", "",
               C.WAITED, L.KEPT, (), "cancelled again"),
    Transition(S.VALIDATING, E.DRY_RUN_VALID, S.VALID, "dry run: validate passed",
               "target.validate", C.WAITED, L.RELEASED, _ENDED, "validated again"),
    Transition(S.VALIDATING, E.DRY_RUN_INVALID, S.INVALID, "dry run: validate failed",
               "target.validate", C.WAITED, L.RELEASED, _ENDED, "validated again"),
    Transition(S.PREPARING, E.PREPARED, S.ACTIVATING, "prepared", "target.prepare", C.QUEUED,
               L.KEPT, (W.ACTIVATED_AT,),
               "prepared and activated again (prepare is idempotent); a rollback "
               "treats it as activated"),
    *_rolls_back(S.PREPARING, "target.prepare", "prepared again"),
    Transition(S.PREPARING, E.STEP_FAILED, S.ROLLING_BACK, "prepare failed after a takeover",
               "target.prepare", C.WAITED, L.KEPT, (W.ACTIVATED_AT,),
               "activate may have run before the crash: the rollback resets the "
               "machine onto its source", taken_over=True),
    Transition(S.PREPARING, E.CANCELLED, S.ROLLING_BACK, "migration cancelled after a takeover",
               "", C.WAITED, L.KEPT, (W.ACTIVATED_AT,),
               "activate may have run before the crash: the rollback resets the "
               "machine onto its source", taken_over=True),
    Transition(S.ACTIVATING, E.ACTIVATED, S.AWAITING_BOOT, "activated", "target.activate",
               C.QUEUED, L.KEPT, (W.DEADLINE,),
               "activated again; evidence counts from activated_at, written before"),
    *_rolls_back(S.ACTIVATING, "target.activate", "activated again"),
    Transition(S.AWAITING_BOOT, E.EVIDENCE, S.VERIFYING,
               "its own artifact fetched or boot report posted", "", C.QUEUED, L.KEPT,
               (W.EVIDENCE,), "awaits its boot again and finds the same evidence"),
    Transition(S.AWAITING_BOOT, E.BOOT_TIMEOUT, S.ROLLING_BACK,
               "no evidence before the deadline", "", C.WAITED, L.KEPT, (),
               "awaits its boot again until the deadline"),
    Transition(S.AWAITING_BOOT, E.CANCELLED, S.ROLLING_BACK, "migration cancelled", "",
               C.WAITED, L.KEPT, (), "awaits its boot again: cancelled again"),
    Transition(S.VERIFYING, E.CLEANED_UP, S.DONE, "source cleaned up", "source.clean_up",
               C.WAITED, L.RELEASED, _ENDED + (W.SWITCH,),
               "cleaned up again: clean_up is idempotent"),
    *_rolls_back(S.VERIFYING, "source.clean_up", "cleaned up again"),
    Transition(S.ROLLING_BACK, E.ROLLED_BACK, S.ROLLED_BACK, "rolled back",
               "target.clean_up, then source.prepare and source.activate if activated",
               C.WAITED, L.RELEASED, (W.FINISHED, W.SOURCE_PREPARED, W.AT_REST),
               "rolled back again: each call is idempotent"),
    Transition(S.ROLLING_BACK, E.ROLLBACK_FAILED, S.ROLLBACK_FAILED, "a rollback call failed",
               "target.clean_up, source.prepare, source.activate", C.WAITED, L.RELEASED,
               (W.FINISHED, W.MACHINE_ERROR), "rolled back again"),
)

del S, E, C, L, W

#: the legal (old, new) pairs
_LEGAL = frozenset((t.old.value, t.new.value) for t in TRANSITIONS)
#: (step, event, taken over) -> row
_ROWS = {(t.old.value, t.on.value, t.taken_over): t for t in TRANSITIONS}


class IllegalTransition(ValueError):
    """A move that the table does not have: a bug in the framework."""


def check(old, new):
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in the table."""
    if (old, new) not in _LEGAL:
        raise IllegalTransition(f"{old} -> {new} is not a migration step's move")


def find(step, event, taken_over=False):
    """The row of ``event`` in ``step`` (for a machine ``taken_over`` from a
    conductor that died, its own row if the table has one), or None."""
    step, event = Step(step).value, Event(event).value
    return (taken_over and _ROWS.get((step, event, True))) or _ROWS.get((step, event, False))


def on(step, event, taken_over=False):
    """Like :func:`find`; raises :class:`IllegalTransition` if there is no row."""
    row = find(step, event, taken_over)
    if row is None:
        raise IllegalTransition(f"a machine in {step} cannot meet {event}")
    return row


class Work(str, enum.Enum):
    """What a machine's coroutine does in a step."""

    #: the plugin call named by the row of the step's success
    CALL = "call"
    #: wait for the machine's boot evidence, until its deadline
    AWAIT_BOOT = "await boot"
    #: the rollback's plugin calls
    ROLL_BACK = "roll back"


#: {step a machine's coroutine runs: (what it does, the event of its success)}
WORK = {Step.VALIDATING.value: (Work.CALL, Event.VALIDATED),
        Step.PREPARING.value: (Work.CALL, Event.PREPARED),
        Step.ACTIVATING.value: (Work.CALL, Event.ACTIVATED),
        Step.AWAITING_BOOT.value: (Work.AWAIT_BOOT, Event.EVIDENCE),
        Step.VERIFYING.value: (Work.CALL, Event.CLEANED_UP),
        Step.ROLLING_BACK.value: (Work.ROLL_BACK, Event.ROLLED_BACK)}


def goes_on(step):
    """Whether a machine's coroutine goes on with ``step`` (None: nothing ran)."""
    return step in IN_FLIGHT


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
#: ends of a dry run's machines that let the real migration go ahead
DRY_RUN_PASSED = (Step.VALID.value, Step.SKIPPED.value)
#: where a machine joins a migration: queued, or skipped if it cannot be
#: migrated (the reason is its last_error)
JOINED, EXCLUDED = Step.QUEUED.value, Step.SKIPPED.value

#: the move forward from each step a plugin call makes: its row
FORWARD_MOVES = {step: on(step, event) for step, (work, event) in WORK.items()
                 if work is Work.CALL}


def plugin_call(move):
    """(``"source"`` or ``"target"``, plugin step) of a move with a single
    plugin call in its ``calls`` ("target.validate"): what the runner calls."""
    role, _, step = move.calls.partition(".")
    if role not in ("source", "target") or not step.isidentifier():
        raise ValueError(f"{move.old} -> {move.new}: not one plugin call: {move.calls!r}")
    return role, step


def rst_table():
    """The table as reStructuredText (the architecture page includes it)."""
    rows = [("from", "event", "to", "plugin calls", "commit", "lock", "written with it",
             "after a crash")]
    rows += [(f"``{t.old}``", f"``{t.on}``" + (" (taken over)" if t.taken_over else "")
              + f": {t.event}", f"``{t.new}``", t.calls or "--", t.commit.value, t.lock.value,
              ", ".join(w.value for w in t.writes) or "--", t.rerun)
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
    edges = {}
    for t in TRANSITIONS:  # one edge per pair of steps, naming each event
        edges.setdefault((t.old.value, t.new.value), []).append(t.event)
    for (old, new), events in edges.items():
        style = ", style=dashed" if new in (Step.ROLLING_BACK.value,) + FAILED else ""
        label = "; ".join(dict.fromkeys(events))
        lines.append(f'    {old} -> {new} [label="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
