"""``metalboot migrations``: create, dry-run, show, list, watch, cancel, pause, resume."""

import datetime
import shutil
import sys
import time

import click

from metalboot_framework import migration_states as states
from metalboot_framework.cli import output
from metalboot_framework.cli.client import EXIT_FAILED, CliError, segment
from metalboot_framework.cli.progress import bar, duration
from metalboot_framework import machine_steps

#: Migration states in which nothing will change any more (with finished_at set).
FINAL_STATES = states.FINAL
#: Machine steps that count as failures for the exit code of watch.
FAILED_STEPS = machine_steps.FAILED + (machine_steps.Step.CANCELLED.value,)
#: Display order of the machine steps.
STEP_ORDER = machine_steps.ALL

LIST_COLUMNS = [("id", "id"), ("state", states.describe), ("to", "boot_interface"),
                ("machines", "total"),
                ("progress", lambda m: f"{round(100 * (m.get('progress') or 0))}%"),
                ("steps", lambda m: _counts_text(m.get("counts") or {})),
                ("created", "created_at"),
                ("dry run", lambda m: bool((m.get("options") or {}).get("dry_run")))]

MACHINE_COLUMNS = [("#", "position"), ("machine", "machine_id"),
                   ("from", "source_boot_interface"), ("step", "state"),
                   ("canary", "canary"),
                   ("evidence", lambda m: (m.get("evidence") or {}).get("path")),
                   ("s to evidence", "seconds_to_evidence"), ("last error", "last_error")]


def _ordered(counts):
    known = [s for s in STEP_ORDER if s in counts]
    return known + sorted(s for s in counts if s not in STEP_ORDER)


def _counts_text(counts):
    return ", ".join(f"{s} {counts[s]}" for s in _ordered(counts)) or "-"


def is_finished(migration):
    return migration["state"] in FINAL_STATES and bool(migration.get("finished_at"))


def succeeded(migration):
    counts = migration.get("counts") or {}
    return migration["state"] == states.DONE and not any(counts.get(s) for s in FAILED_STEPS)


def migration_machines(client, migration_id, state=None):
    return list(client.pages(f"/v1/migrations/{segment(migration_id)}/machines", "machines",
                             state=state))


@click.group("migrations")
def group():
    """Move machines to another boot interface, and watch them go."""


def selector_options(f):
    for option in reversed((
            click.option("--to", "--boot-interface", "target", required=True,
                         metavar="INTERFACE", help="The target boot interface."),
            click.option("--machine", "machines", multiple=True, metavar="ID",
                         help="A machine to migrate (repeatable, or comma-separated)."),
            click.option("--partition", help="Migrate the machines of this partition."),
            click.option("--from", "--from-boot-interface", "source", metavar="INTERFACE",
                         help="With --partition: only machines now on this interface."),
            click.option("--max-parallel", type=click.IntRange(min=1),
                         help="Machines in flight at once (server default 10)."),
            click.option("--max-failures", metavar="N|P%",
                         help="Halt after this many (or this share of) failed machines."),
            click.option("--canary", type=click.IntRange(min=0),
                         help="The first N machines must all succeed before the rest start."),
            click.option("--boot-timeout", type=click.IntRange(min=1), metavar="SECONDS",
                         help="Seconds from activation to boot evidence."),
            click.option("--require-boot-report", is_flag=True, default=None,
                         help="Done only on the booted system's boot report, not on the "
                              "firmware's first fetch."))):
        f = option(f)
    return f


def _create_body(target, machines, partition, source, max_parallel, max_failures, canary,
                 boot_timeout, dry_run, require_boot_report=None):
    ids = [m.strip() for item in machines for m in item.split(",") if m.strip()]
    if bool(ids) == bool(partition):
        raise click.UsageError("give either --machine (one or more) or --partition")
    if source and not partition:
        raise click.UsageError("--from filters a --partition selection only")
    selector = {"machines": ids} if ids else {"partition": partition}
    if source:
        selector["boot_interface"] = source
    body = {"selector": selector, "boot_interface": target, "dry_run": dry_run}
    if max_parallel is not None:
        body["max_parallel"] = max_parallel
    if max_failures is not None:
        text = max_failures.strip()
        body["max_failures"] = int(text) if text.isdigit() else text
    if canary is not None:
        body["canary"] = canary
    if boot_timeout is not None:
        body["boot_timeout"] = boot_timeout
    if require_boot_report:
        body["require_boot_report"] = True
    return body


@group.command("create")
@selector_options
@click.option("--watch", is_flag=True, help="Then watch it until it finishes (exit code as "
              "for 'migrations watch').")
@output.output_option
@click.pass_obj
def create(obj, watch, output_, **options):
    """Start a migration of the selected machines to --to INTERFACE."""
    migration = obj.client.post("/v1/migrations", _create_body(dry_run=False, **options))
    if not watch:
        output.show(obj, output_, migration, output.details)
        return
    if output.fmt(obj, output_) != "json":
        click.echo(f"migration {migration['id']}: {migration['total']} machine(s) to "
                   f"{migration['boot_interface']}")
    raise SystemExit(_watch(obj, migration["id"], output_, interval=1.0, timeout=None))


@group.command("dry-run")
@selector_options
@click.option("--timeout", type=click.FloatRange(min=0), default=300, show_default=True,
              help="Seconds to wait for the validation of every machine.")
@output.output_option
@click.pass_obj
def dry_run(obj, timeout, output_, **options):
    """Validate the selected machines against --to INTERFACE; change nothing.

    Exit 0 when every machine can use the interface, 1 otherwise.
    """
    client = obj.client
    migration = client.post("/v1/migrations", _create_body(dry_run=True, **options))
    deadline = time.monotonic() + timeout
    while not is_finished(migration):
        if time.monotonic() > deadline:
            raise CliError(f"dry run {migration['id']} still {migration['state']} after "
                           f"{timeout:g} s")
        time.sleep(0.3)
        migration = client.get(f"/v1/migrations/{segment(migration['id'])}")
    machines = migration_machines(client, migration["id"])
    ok = migration["state"] == states.DONE and all(
        m["state"] in machine_steps.DRY_RUN_PASSED for m in machines)
    if output.fmt(obj, output_) == "json":
        output.emit_json(dict(migration, machines=machines))
    else:
        output.table(machines, [("machine", "machine_id"), ("from", "source_boot_interface"),
                                ("result", "state"), ("reason", "last_error")])
        click.echo(f"dry run {migration['id']}: {_counts_text(migration['counts'])}")
    if not ok:
        raise SystemExit(EXIT_FAILED)


@group.command("list")
@click.option("--state", type=click.Choice(states.STATES))
@click.option("--result", type=click.Choice(states.RESULTS),
              help="Only finished migrations that went so for their machines.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@output.output_option
@click.pass_obj
def list_(obj, state, result, limit, output_):
    """List migrations, newest first."""
    items = list(obj.client.pages("/v1/migrations", "migrations", limit=limit,
                                  page_size=min(limit, 1000), state=state, result=result))
    output.show(obj, output_, items, lambda ms: output.table(ms, LIST_COLUMNS))


@group.command("show")
@click.argument("migration_id")
@click.option("--machines", "with_machines", is_flag=True,
              help="Also list each machine's step, evidence and last error.")
@output.output_option
@click.pass_obj
def show(obj, migration_id, with_machines, output_):
    """Show one migration."""
    migration = obj.client.get(f"/v1/migrations/{segment(migration_id)}")
    machines = migration_machines(obj.client, migration_id) if with_machines else None
    if output.fmt(obj, output_) == "json":
        output.emit_json(dict(migration, machines=machines) if with_machines else migration)
        return
    # the state as a person reads it: "done, failed (3 of 3 machines failed)"
    output.details(dict(migration, state=states.describe(migration)))
    if with_machines:
        click.echo("")
        output.table(machines, MACHINE_COLUMNS)


def _action(name, doc):
    @click.argument("migration_id")
    @output.output_option
    @click.pass_obj
    def command(obj, migration_id, output_):
        migration = obj.client.post(f"/v1/migrations/{segment(migration_id)}/{name}")
        if output.fmt(obj, output_) == "json":
            output.emit_json(migration)
        else:
            click.echo(f"migration {migration['id']}: {states.describe(migration)} "
                       f"({_counts_text(migration.get('counts') or {})})")
    command.__doc__ = doc
    group.command(name)(command)


_action("cancel", "Cancel: no new machine starts; machines in flight are rolled back.")
_action("pause", "Pause: no new machine starts; machines in flight carry on.")
_action("resume", "Resume a paused migration.")


# -- watch -------------------------------------------------------------------------------

def _eta_seconds(m):
    """Seconds until the server's estimated completion, or None."""
    if not m.get("estimated_completion") or m.get("finished_at"):
        return None
    eta = datetime.datetime.fromisoformat(m["estimated_completion"].replace("Z", "+00:00"))
    return max(0.0, (eta - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def progress_text(m):
    """``120/1000 machines finished (3 failed), ETA 2m13s``: counts and time left."""
    counts = m.get("counts") or {}
    finished = sum(counts.get(step, 0) for step in machine_steps.FINISHED)
    failed = states.machines_failed(counts)
    text = f"{finished}/{m.get('total') or 0} machines finished"
    if failed:
        text += f" ({failed} failed)"
    eta = _eta_seconds(m)
    if eta is not None:
        text += f", ETA {duration(eta)}"
    return text


class Display:
    """Progress of a migration: on a terminal a bar of all its machines (counts,
    ETA) and one per step, redrawn in place; otherwise a plain line per change."""

    def __init__(self, stream=None, tty=None):
        self.stream = stream or click.get_text_stream("stdout")
        self.tty = self.stream.isatty() if tty is None else tty
        self._drawn = 0
        self._last = None

    def _lines(self, m):
        counts = m.get("counts") or {}
        total = max(m.get("total") or 0, 1)
        columns = shutil.get_terminal_size((80, 20)).columns
        width = max(10, min(40, columns - 36))
        overall = f"{round(100 * (m.get('progress') or 0)):>3}%  {progress_text(m)}"
        # as wide as the line leaves room for: the counts and ETA must show
        all_width = max(10, min(width, columns - 23 - len(overall)))
        lines = [f"migration {m['id']} -> {m['boot_interface']}: {states.describe(m)}",
                 f"  {'all':<16} {bar(m.get('progress') or 0, all_width)} {overall}"]
        for step in _ordered(counts):
            lines.append(f"  {step:<16} {bar(counts[step] / total, width)} {counts[step]:>5}")
        return lines

    def update(self, m):
        if self.tty:
            # a wrapped line would break the redrawing: cut at the terminal's width
            columns = shutil.get_terminal_size((80, 20)).columns
            lines = [line[:max(columns - 1, 20)] for line in self._lines(m)]
            out = []
            if self._drawn:
                out.append(f"\x1b[{self._drawn}F")  # to the start of the first drawn line
            for line in lines:
                out.append("\x1b[2K" + line + "\n")
            for _ in range(self._drawn - len(lines)):
                out.append("\x1b[2K\n")
            extra = max(self._drawn - len(lines), 0)
            if extra:
                out.append(f"\x1b[{extra}F")
            self.stream.write("".join(out))
            self.stream.flush()
            self._drawn = len(lines)
            return
        key = (m["state"], tuple(sorted((m.get("counts") or {}).items())))
        if key == self._last:
            return
        self._last = key
        self.stream.write(f"{time.strftime('%H:%M:%S')} migration {m['id']} "
                          f"{states.describe(m)} "
                          f"{round(100 * (m.get('progress') or 0))}%: "
                          f"{_counts_text(m.get('counts') or {})}; {progress_text(m)}\n")
        self.stream.flush()


def _watch(obj, migration_id, output_, interval, timeout, display=None):
    client = obj.client
    as_json = output.fmt(obj, output_) == "json"
    display = display or (None if as_json else Display())
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            migration = client.get(f"/v1/migrations/{segment(migration_id)}")
            if display:
                display.update(migration)
            if is_finished(migration):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise CliError(f"migration {migration_id} still {migration['state']} after "
                               f"{timeout:g} s")
            time.sleep(interval)
    except KeyboardInterrupt:
        click.echo(f"\nstopped watching; migration {migration_id} carries on "
                   f"(metalboot migrations watch {migration_id})", err=True)
        return 130
    ok = succeeded(migration)
    failed = [] if ok else [m for m in migration_machines(client, migration_id)
                            if m["state"] in FAILED_STEPS]
    if as_json:
        output.emit_json(dict(migration, failed_machines=failed))
    else:
        click.echo(f"migration {migration_id} {states.describe(migration)}: "
                   f"{_counts_text(migration.get('counts') or {})}"
                   + (f" ({migration['reason']})" if migration.get("reason") else ""))
        for m in failed:
            click.echo(f"  {m['machine_id']}: {m['state']}: {m.get('last_error') or '-'}")
    return 0 if ok else EXIT_FAILED


@group.command("watch")
@click.argument("migration_id")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between polls.")
@click.option("--timeout", type=click.FloatRange(min=0), default=None,
              help="Give up (exit 1) after this many seconds.")
@output.output_option
@click.pass_obj
def watch(obj, migration_id, interval, timeout, output_):
    """Show live progress per step until the migration finishes.

    Exit 0 when it is done with no failed machine; 1 when it halted, was
    cancelled, or machines were rolled back or invalid.
    """
    sys.exit(_watch(obj, migration_id, output_, interval, timeout))
