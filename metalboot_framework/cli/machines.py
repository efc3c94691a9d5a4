"""``metalboot machines``: list, show, register, import, validate, delete."""

import csv
import io
import json
import os

import click

from metalboot_framework import machine_lifecycle
from metalboot_framework.cli import output
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.cli.client import EXIT_FAILED, EXIT_USAGE, CliError, segment
from metalboot_framework.cli.common import bmc_password, drop_none, json_or_string, \
    parse_properties
from metalboot_framework.cli.progress import Progress

#: CSV columns understood by ``machines import`` (others must be property.<name>).
CSV_COLUMNS = ("id", "partition", "mac", "bmc_address", "bmc_username", "bmc_password",
               "bmc_verify_tls", "boot_interface", "boot_mode", "properties")
#: The API accepts at most this many machines per request by default.
MAX_BATCH = 10000
#: Machines per request of ``machines import``: each request is all or
#: nothing, and the progress moves once per request.
BATCH = 500

LIST_COLUMNS = [("id", "id"), ("partition", "partition"),
                ("boot interface", "boot_interface"), ("mode", "boot_mode"),
                ("state", "state"),
                ("migration", lambda m: (m.get("migration") or {}).get("step")),
                ("macs", lambda m: [n["mac"] for n in m.get("nics") or []])]


@click.group("machines")
def group():
    """Register and inspect machines."""


@group.command("list")
@click.option("--partition", help="Only machines of this partition.")
@click.option("--boot-interface", help="Only machines on this boot interface.")
@click.option("--state", type=click.Choice(
    [s for s in machine_lifecycle.ALL if s != State.DELETING]))
@click.option("--limit", type=click.IntRange(min=1), help="Show at most this many.")
@output.output_option
@click.pass_obj
def list_(obj, partition, boot_interface, state, limit, output_):
    """List machines (all pages)."""
    machines = list(obj.client.pages("/v1/machines", "machines", limit=limit,
                                     page_size=min(limit or 1000, 1000),
                                     partition=partition, boot_interface=boot_interface,
                                     state=state))
    output.show(obj, output_, machines, lambda ms: output.table(ms, LIST_COLUMNS))


@group.command("show")
@click.argument("machine_id")
@output.output_option
@click.pass_obj
def show(obj, machine_id, output_):
    """Show one machine."""
    machine = obj.client.get(f"/v1/machines/{segment(machine_id)}")
    output.show(obj, output_, machine, output.details)


@group.command("register")
@click.option("--id", "machine_id", required=True, help="metal-api's machine UUID.")
@click.option("--partition", required=True)
@click.option("--mac", "macs", multiple=True, help="NIC MAC address (repeatable).")
@click.option("--bmc-address", help="BMC: host, host:port or http(s)://host[:port].")
@click.option("--bmc-username")
@click.option("--bmc-password-stdin", is_flag=True,
              help="Read the BMC password from the first line of standard input.")
@click.option("--bmc-password-prompt", is_flag=True,
              help="Ask for the BMC password (not echoed).")
@click.option("--bmc-verify-tls/--no-bmc-verify-tls", default=None,
              help="Verify the BMC's TLS certificate.")
@click.option("--boot-interface", help="Default: the server's default_boot_interface.")
@click.option("--boot-mode", type=click.Choice(("uefi", "bios")))
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Machine property (repeatable; VALUE may be JSON).")
@output.output_option
@click.pass_obj
def register(obj, machine_id, partition, macs, bmc_address, bmc_username, bmc_password_stdin,
             bmc_password_prompt, bmc_verify_tls, boot_interface, boot_mode, properties,
             output_):
    """Register one machine.

    The BMC password is never taken from the command line: give
    --bmc-password-stdin, --bmc-password-prompt or set METALBOOT_BMC_PASSWORD.
    """
    body = {"id": machine_id, "partition": partition}
    if macs:
        body["nics"] = [{"mac": mac} for mac in macs]
    password = bmc_password(bmc_password_stdin, bmc_password_prompt, bool(bmc_username))
    if bmc_address or bmc_username or password or bmc_verify_tls is not None:
        if not bmc_address:
            raise click.UsageError("--bmc-username, a BMC password and --bmc-verify-tls "
                                   "need --bmc-address")
        body["bmc"] = drop_none({"address": bmc_address, "username": bmc_username,
                                 "password": password, "verify_tls": bmc_verify_tls})
    body.update(drop_none({"boot_interface": boot_interface, "boot_mode": boot_mode}))
    if properties:
        body["properties"] = parse_properties(properties)
    machine = obj.client.post("/v1/machines", body)
    output.show(obj, output_, machine, output.details)


def _truthy(value, where):
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise CliError(f"{where}: expected true or false, got {value!r}", EXIT_USAGE)


def machines_from_csv(text, source="CSV"):
    """Machine bodies from CSV with a header row (columns: CSV_COLUMNS, property.<name>)."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise CliError(f"{source}: empty file, expected a header row", EXIT_USAGE)
    headers = [h.strip() for h in reader.fieldnames]
    unknown = [h for h in headers if h not in CSV_COLUMNS and not h.startswith("property.")]
    if unknown:
        raise CliError(f"{source}: unknown column(s) {', '.join(unknown)} (known: "
                       f"{', '.join(CSV_COLUMNS)}, property.<name>)", EXIT_USAGE)
    for required in ("id", "partition"):
        if required not in headers:
            raise CliError(f"{source}: column {required} is missing", EXIT_USAGE)
    bodies = []
    for number, raw in enumerate(reader, start=2):
        if None in raw:
            raise CliError(f"{source} line {number}: more cells than columns", EXIT_USAGE)
        row = {k.strip(): (v or "").strip() for k, v in raw.items()}
        if not any(row.values()):
            continue
        body = {"id": row["id"], "partition": row["partition"]}
        macs = [m for m in row.get("mac", "").replace(";", " ").replace("|", " ").split() if m]
        if macs:
            body["nics"] = [{"mac": m} for m in macs]
        if row.get("bmc_address"):
            body["bmc"] = {"address": row["bmc_address"]}
            if row.get("bmc_username"):
                body["bmc"]["username"] = row["bmc_username"]
            if row.get("bmc_password"):
                body["bmc"]["password"] = row["bmc_password"]
            if row.get("bmc_verify_tls"):
                body["bmc"]["verify_tls"] = _truthy(row["bmc_verify_tls"],
                                                    f"{source} line {number}")
        elif row.get("bmc_username") or row.get("bmc_password"):
            raise CliError(f"{source} line {number}: bmc_username/bmc_password without "
                           f"bmc_address", EXIT_USAGE)
        for key in ("boot_interface", "boot_mode"):
            if row.get(key):
                body[key] = row[key]
        props = {}
        if row.get("properties"):
            try:
                props = json.loads(row["properties"])
            except ValueError as exc:
                raise CliError(f"{source} line {number}: properties is not JSON: {exc}",
                               EXIT_USAGE) from None
            if not isinstance(props, dict):
                raise CliError(f"{source} line {number}: properties must be a JSON object",
                               EXIT_USAGE)
        for key, value in row.items():
            if key.startswith("property.") and value != "":
                props[key[len("property."):]] = json_or_string(value)
        if props:
            body["properties"] = props
        bodies.append(body)
    return bodies


def machines_from_json(text, source="JSON"):
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{source}: not valid JSON: {exc}", EXIT_USAGE) from None
    if isinstance(data, dict) and isinstance(data.get("machines"), list):
        data = data["machines"]  # what `machines list -o json` wraps, or a saved answer
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise CliError(f"{source}: expected a machine object or a list of them", EXIT_USAGE)
    return data


@group.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8-sig"))
@click.option("--format", "format_", type=click.Choice(("auto", "json", "csv")),
              default="auto", show_default=True,
              help="File format; auto: by extension (.csv), else by content.")
@click.option("--batch-size", type=click.IntRange(1, MAX_BATCH), default=BATCH,
              show_default=True,
              help="Machines per request; each request is all or nothing (give "
                   f"{MAX_BATCH} for one request of up to {MAX_BATCH} machines).")
@output.output_option
@click.pass_obj
def import_(obj, file, format_, batch_size, output_):
    """Register machines from a JSON or CSV FILE ('-' for stdin), in batches.

    Each batch (--batch-size machines) is registered all or nothing; when one
    fails, the machines of the batches before it stay registered and the
    message names the first line (item) not registered. Progress: a bar with
    counts and the time left on a terminal, a line per batch otherwise, none
    with -o json.

    \b
    JSON: one machine object or a list, as POST /v1/machines takes them.
    CSV: a header row, then one machine per row. Columns:
      id, partition (required), mac (several separated by ';' or spaces),
      bmc_address, bmc_username, bmc_password, bmc_verify_tls,
      boot_interface, boot_mode, properties (a JSON object),
      property.<name> (one property; the value may be JSON).
    """
    name = getattr(file, "name", "-")
    try:
        text = file.read()
    except UnicodeDecodeError as exc:
        raise CliError(f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason})",
                       EXIT_USAGE) from None
    if format_ == "auto":
        if str(name).lower().endswith(".csv"):
            format_ = "csv"
        elif str(name).lower().endswith(".json") or text.lstrip()[:1] in ("[", "{"):
            format_ = "json"
        else:
            format_ = "csv"
    source = os.path.basename(str(name)) if name != "<stdin>" else "stdin"
    bodies = machines_from_csv(text, source) if format_ == "csv" else \
        machines_from_json(text, source)
    if not bodies:
        raise CliError(f"{source}: no machines in the file", EXIT_USAGE)
    created = []
    as_json = output.fmt(obj, output_) == "json"
    progress = Progress(len(bodies), f"machines registered from {source}",
                        quiet=as_json or len(bodies) <= batch_size)
    for start in range(0, len(bodies), batch_size):
        chunk = bodies[start:start + batch_size]
        try:
            answer = obj.client.post("/v1/machines", chunk)
        except CliError as exc:
            progress.finish()
            if len(bodies) > batch_size:
                exc.message += (f" (batch of machines {start + 1}-{start + len(chunk)}; "
                                f"{len(created)} registered before it, the first not "
                                f"registered is {_row_name(format_, start)})")
            _hint_rows(exc, format_, start)
            raise
        created.extend(answer["machines"])
        progress.update(len(created))
    progress.finish()
    if as_json:
        output.emit_json({"machines": created, "count": len(created)})
    else:
        click.echo(f"registered {len(created)} machine(s) from {source}")


def _row_name(format_, index):
    return f"CSV line {index + 2}" if format_ == "csv" else f"item {index}"


def _hint_rows(exc, format_, start):
    """Name the file's line (CSV) or item for the first field error: '0.nics.0.mac'."""
    fields = getattr(exc, "fields", None)
    if not fields:
        return
    first = sorted(fields)[0].split(".", 1)[0]
    if first.isdigit():
        exc.message += (f" (first error at {_row_name(format_, start + int(first))}; "
                        f"field names are item.field)")


@group.command("validate")
@click.argument("machine_id")
@click.option("--boot-interface", help="Check this interface instead of the current one.")
@output.output_option
@click.pass_obj
def validate(obj, machine_id, boot_interface, output_):
    """Ask a boot interface whether the machine can use it; exit 1 when it cannot."""
    body = drop_none({"boot_interface": boot_interface})
    result = obj.client.post(f"/v1/machines/{segment(machine_id)}/validate", body)
    if output.fmt(obj, output_) == "json":
        output.emit_json(result)
    elif result["valid"]:
        click.echo(f"machine {result['machine_id']} can use {result['boot_interface']}")
    else:
        fields = "; ".join(f"{k}: {' '.join(v) if isinstance(v, list) else v}"
                           for k, v in sorted((result.get("fields") or {}).items()))
        click.echo(f"machine {result['machine_id']} cannot use {result['boot_interface']}: "
                   f"{result['reason']}" + (f" [{fields}]" if fields else ""))
    if not result["valid"]:
        raise SystemExit(EXIT_FAILED)


@group.command("delete")
@click.argument("machine_ids", nargs=-1, required=True)
@click.option("--force", is_flag=True,
              help="Forget them now, without cleaning up what their boot interface "
                   "prepared (DHCP entries, boot overrides).")
@output.output_option
@click.pass_obj
def delete(obj, machine_ids, force, output_):
    """Forget one or more machines (their event history stays); stops at the first error.

    A machine prepared for a boot interface is ``deleting`` until the conductor has
    cleaned that up."""
    as_json = output.fmt(obj, output_) == "json"
    for machine_id in machine_ids:
        machine = obj.client.request("DELETE", f"/v1/machines/{segment(machine_id)}",
                                     params={"force": "true"} if force else None)
        if as_json:
            output.emit_json({"deleted": machine_id, "state": machine["state"]} if machine
                             else {"deleted": machine_id})
        elif machine:
            click.echo(f"deleting machine {machine_id}: the conductor cleans up "
                       f"{machine['prepared_interface']} first")
        else:
            click.echo(f"deleted machine {machine_id}")
