"""A machine's own lifecycle (``machines.state``), as one table.

Where a machine is at rest or in a migration, and every change of that state
as a row of :data:`CHANGES`: the states it comes from, what happens, the
state it goes to and who makes the change. The API, the CLI, the conductor
and the docs take their states from here; the architecture page's diagram
and table are generated from the table. (A machine's steps within a
migration are :mod:`metalboot_framework.machine_steps`.)

This module imports nothing of the framework, so that anything may import it.
"""

import dataclasses
import enum


class State(str, enum.Enum):
    """Where a machine is (``machines.state``)."""

    ENROLLING = "enrolling"  # the conductor is to prepare its boot interface
    READY = "ready"  # prepared for its boot interface, at rest
    MIGRATING = "migrating"  # in a migration's steps (machine_steps)
    MAINTENANCE = "maintenance"  # set aside by an operator: no migration takes it
    ERROR = "error"  # for an operator: see its last_error
    DELETING = "deleting"  # the conductor is to clean up its boot interface, then forget it

    def __str__(self):
        return self.value


#: every state, in the order a person reads them
ALL = tuple(s.value for s in State)
#: the states an operator may set through the API
SETTABLE = (State.READY.value, State.MAINTENANCE.value, State.ENROLLING.value)
#: the states a migration may take a machine from
MIGRATABLE = (State.READY.value, State.ENROLLING.value)
#: the states in which the API clears a machine's last error
CLEARS_ERROR = MIGRATABLE
#: shown when a machine is gone (not a state: its row is deleted)
GONE = "(forgotten)"


@dataclasses.dataclass(frozen=True)
class Change:
    """One row of the table: from any of ``old`` (none: a new machine), on
    ``event``, to ``new``, made ``by`` the API or the conductor."""

    old: tuple
    event: str
    new: str
    by: str


S = State
_AT_REST = (S.ENROLLING, S.READY, S.MAINTENANCE, S.ERROR)

CHANGES = (
    Change((), "registered", S.ENROLLING, "API: POST /v1/machines"),
    Change((S.ENROLLING,), "enrolled: its boot interface validated and prepared", S.READY,
           "conductor (enrolment)"),
    Change((S.ENROLLING,), "enrolment failed", S.ERROR, "conductor (enrolment)"),
    Change((S.READY,), "its boot interface, or what it was prepared from, changed",
           S.ENROLLING, "API: PATCH"),
    Change(_AT_REST, "set by an operator", S.READY, "API: PATCH state"),
    Change(_AT_REST, "set by an operator", S.MAINTENANCE, "API: PATCH state"),
    Change(_AT_REST, "set by an operator", S.ENROLLING, "API: PATCH state"),
    Change((S.READY, S.ENROLLING), "joined a migration", S.MIGRATING, "API: POST /v1/migrations"),
    Change((S.MIGRATING,), "migrated: it boots through the target now", S.READY,
           "conductor (migration step done)"),
    Change((S.MIGRATING,), "back at rest (rolled back, skipped, cancelled), prepared for its "
           "boot interface", S.READY, "conductor (migration step)"),
    Change((S.MIGRATING,), "back at rest, not prepared for its boot interface", S.ENROLLING,
           "conductor (migration step)"),
    Change((S.MIGRATING,), "rollback failed", S.ERROR, "conductor (migration step)"),
    Change(_AT_REST, "deleted while prepared for a boot interface", S.DELETING, "API: DELETE"),
    Change((S.DELETING,), "its boot interface cleaned up", GONE, "conductor (removal)"),
    Change((S.DELETING,), "clean-up failed", S.ERROR, "conductor (removal)"),
)

del S


def rst_table():
    """The table as reStructuredText (the architecture page includes it)."""
    lines = [".. list-table::", "   :header-rows: 1", "",
             "   * - from", "     - event", "     - to", "     - by"]
    for c in CHANGES:
        lines += ["   * - " + (", ".join(f"``{s}``" for s in c.old) or "--"),
                  f"     - {c.event}", f"     - ``{c.new}``", f"     - {c.by}"]
    return "\n".join(lines) + "\n"


def dot():
    """The lifecycle in Graphviz's language, edges from the table."""
    lines = ["digraph machine_lifecycle {", "    rankdir=LR;",
             '    node [shape=box, style=rounded, fontname="sans-serif", fontsize=10];',
             '    edge [fontname="sans-serif", fontsize=8];',
             '    registered [shape=point];', f'    "{GONE}" [peripheries=2];']
    edges = {}
    for c in CHANGES:
        for old in c.old or ("registered",):
            if old != c.new:  # (an operator may set the state a machine is in)
                edges.setdefault((str(old), str(c.new)), []).append(c.event)
    for (old, new), events in edges.items():
        label = "; ".join(dict.fromkeys(events))
        lines.append(f'    "{old}" -> "{new}" [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
