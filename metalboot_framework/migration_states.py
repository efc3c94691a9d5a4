"""The states of a migration and the result of a finished one, in one place.

A migration is ``running``, ``paused`` or ``cancelling`` while its machines
move. Past its failure budget (or with a failed canary) it is ``halting``: no
machine starts any more, queued ones are cancelled, and those in flight finish
what they do (boot, or roll back); only when the last of them has ended is it
``halted``. ``done``, ``halted`` and ``cancelled`` are final: ``finished_at``
is set and nothing changes any more.

The state says why a migration stopped, not how it went: a ``done``
migration whose every machine was rolled back is still ``done``. Its
``result`` says how it went, set when it reaches a final state:
``succeeded`` (no machine failed), ``partially_failed`` (some failed, some
succeeded), ``failed`` (machines failed, none succeeded), ``not_run`` (no
machine got to the end: all were cancelled or skipped).

No server import here: the CLI reads this module too.
"""

from metalboot_framework import machine_steps

RUNNING = "running"
PAUSED = "paused"
CANCELLING = "cancelling"
HALTING = "halting"
DONE = "done"
HALTED = "halted"
CANCELLED = "cancelled"

#: States in which machines may still move.
LIVE = (RUNNING, PAUSED, CANCELLING, HALTING)
#: States in which nothing changes any more (``finished_at`` is set).
FINAL = (DONE, HALTED, CANCELLED)
STATES = LIVE + FINAL


SUCCEEDED = "succeeded"
PARTIALLY_FAILED = "partially_failed"
FAILED = "failed"
NOT_RUN = "not_run"
RESULTS = (SUCCEEDED, PARTIALLY_FAILED, FAILED, NOT_RUN)


def machines_succeeded(counts):
    """Machines of ``counts`` ({step: machines}) that ended well."""
    return sum(counts.get(step, 0) for step in machine_steps.SUCCEEDED)


def machines_failed(counts):
    """Machines of ``counts`` ({step: machines}) that ended failed."""
    return sum(counts.get(step, 0) for step in machine_steps.FAILED)


def result(counts):
    """How a migration with ``counts`` ({step: machines}) went for its machines."""
    ok, failed = machines_succeeded(counts), machines_failed(counts)
    if failed:
        return PARTIALLY_FAILED if ok else FAILED
    return SUCCEEDED if ok else NOT_RUN


def describe(migration):
    """The state a person reads: ``done``, ``done, partially failed (1 of 4
    machines failed)``, ``halting``; ``migration`` as the API shows it."""
    outcome = migration.get("result")
    if not outcome:
        return migration["state"]
    text = f"{migration['state']}, {outcome.replace('_', ' ')}"
    failed = migration.get("failed") or 0
    if failed:
        ran = failed + (migration.get("succeeded") or 0)
        text += f" ({failed} of {ran} machine{'s' if ran != 1 else ''} failed)"
    return text
