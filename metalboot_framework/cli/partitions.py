"""``metalboot partitions``: list, show, create, update, delete."""

import click

from metalboot_framework.cli import output
from metalboot_framework.cli.client import segment
from metalboot_framework.cli.common import drop_none, parse_properties

LIST_COLUMNS = [("id", "id"), ("machines", "machine_count"),
                ("kernel", lambda p: (p.get("boot") or {}).get("kernel_url")),
                ("metal-hammer", lambda p: (p.get("boot") or {}).get("metal_hammer_version")),
                ("description", "description")]


def boot_options(f):
    for option in reversed((
            click.option("--description"),
            click.option("--kernel-url", help="Kernel (metal-hammer) URL."),
            click.option("--initrd-url", help="Initrd URL."),
            click.option("--cmdline", help="Kernel command line."),
            click.option("--metal-boot-url", help="Base URL of metal-boot in the partition."),
            click.option("--metal-hammer-version"),
            click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
                         help="Partition property (repeatable; VALUE may be JSON)."))):
        f = option(f)
    return f


def _body(description, kernel_url, initrd_url, cmdline, metal_boot_url, metal_hammer_version,
          properties):
    body = drop_none({"description": description})
    boot = drop_none({"kernel_url": kernel_url, "initrd_url": initrd_url, "cmdline": cmdline,
                      "metal_boot_url": metal_boot_url,
                      "metal_hammer_version": metal_hammer_version})
    if boot:
        body["boot"] = boot
    if properties:
        body["properties"] = parse_properties(properties)
    return body


@click.group("partitions")
def group():
    """Partitions and their boot configuration."""


@group.command("list")
@output.output_option
@click.pass_obj
def list_(obj, output_):
    """List partitions with their machine counts."""
    partitions = obj.client.get("/v1/partitions")["partitions"]
    output.show(obj, output_, partitions, lambda ps: output.table(ps, LIST_COLUMNS))


@group.command("show")
@click.argument("partition_id")
@output.output_option
@click.pass_obj
def show(obj, partition_id, output_):
    """Show one partition."""
    output.show(obj, output_, obj.client.get(f"/v1/partitions/{segment(partition_id)}"),
                output.details)


@group.command("create")
@click.argument("partition_id")
@boot_options
@output.output_option
@click.pass_obj
def create(obj, partition_id, output_, **options):
    """Create a partition."""
    body = dict(_body(**options), id=partition_id)
    output.show(obj, output_, obj.client.post("/v1/partitions", body), output.details)


@group.command("update")
@click.argument("partition_id")
@boot_options
@output.output_option
@click.pass_obj
def update(obj, partition_id, output_, **options):
    """Change a partition; boot fields given replace those stored, others stay."""
    body = _body(**options)
    if not body:
        raise click.UsageError("give at least one option to change")
    output.show(obj, output_, obj.client.patch(f"/v1/partitions/{segment(partition_id)}", body),
                output.details)


@group.command("delete")
@click.argument("partition_id")
@output.output_option
@click.pass_obj
def delete(obj, partition_id, output_):
    """Delete a partition that has no machines."""
    obj.client.delete(f"/v1/partitions/{segment(partition_id)}")
    if output.fmt(obj, output_) == "json":
        output.emit_json({"deleted": partition_id})
    else:
        click.echo(f"deleted partition {partition_id}")
