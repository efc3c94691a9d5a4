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
            click.option("--boot-url", help="URL of the partition's boot agents (machines "
                                            "boot from it; default: the API's public URL)."),
            click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
                         help="Partition property (repeatable; VALUE may be JSON)."))):
        f = option(f)
    return f


def _body(description, kernel_url, initrd_url, cmdline, metal_boot_url, metal_hammer_version,
          boot_url, properties):
    body = drop_none({"description": description})
    boot = drop_none({"kernel_url": kernel_url, "initrd_url": initrd_url, "cmdline": cmdline,
                      "metal_boot_url": metal_boot_url,
                      "metal_hammer_version": metal_hammer_version, "boot_url": boot_url})
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


TOKEN_COLUMNS = [("id", "id"), ("created", "created_at"), ("expires", "expires_at"),
                 ("last used", "last_used_at"), ("description", "description")]


@group.group("agent-token")
def agent_token():
    """Tokens of a partition's boot agents (metalboot-boot-agent): each reads only
    its partition's boot data and delivers only its evidence."""


def _tokens_url(partition_id, *rest):
    return "/".join((f"/v1/partitions/{segment(partition_id)}/agent-tokens",
                     *(segment(r) for r in rest)))


def _show_new_token(obj, output_, made):
    if output.fmt(obj, output_) == "json":
        output.emit_json(made)
        return
    click.echo(f"agent token {made['id']} of partition {made['partition']} (shown only "
               "now; put it in the agents' [agent] token_file):", err=True)
    click.echo(made["token"])


@agent_token.command("create")
@click.argument("partition_id")
@click.option("--description", default="", help="Where it is used (e.g. the agents' hosts).")
@output.output_option
@click.pass_obj
def token_create(obj, partition_id, description, output_):
    """Make a token for the partition's agents; prints it once."""
    _show_new_token(obj, output_, obj.client.post(_tokens_url(partition_id),
                                                  {"description": description}))


@agent_token.command("list")
@click.argument("partition_id")
@output.output_option
@click.pass_obj
def token_list(obj, partition_id, output_):
    """The partition's valid agent tokens (never the tokens themselves)."""
    tokens = obj.client.get(_tokens_url(partition_id))["agent_tokens"]
    output.show(obj, output_, tokens, lambda ts: output.table(ts, TOKEN_COLUMNS))


@agent_token.command("revoke")
@click.argument("partition_id")
@click.argument("token_id")
@click.pass_obj
def token_revoke(obj, partition_id, token_id):
    """Revoke an agent token: it stops working at once."""
    obj.client.delete(_tokens_url(partition_id, token_id))
    click.echo(f"revoked agent token {token_id} of partition {partition_id}")


@agent_token.command("rotate")
@click.argument("partition_id")
@click.argument("token_id")
@click.option("--grace", type=click.IntRange(0, 7 * 86400), default=600, show_default=True,
              help="Seconds the old token keeps working.")
@output.output_option
@click.pass_obj
def token_rotate(obj, partition_id, token_id, grace, output_):
    """Replace an agent token; the old one works GRACE seconds more."""
    _show_new_token(obj, output_, obj.client.post(
        _tokens_url(partition_id, token_id, "rotate") + f"?grace={grace}", None))
