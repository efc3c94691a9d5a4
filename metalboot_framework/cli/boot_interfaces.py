"""``metalboot boot-interfaces``: what the server offers."""

import click

from metalboot_framework.cli import output

COLUMNS = [("name", lambda i: i["name"] + (" (default)" if i.get("default") else "")),
           ("capabilities", "capabilities"),
           ("required properties",
            lambda i: [k for k, v in (i.get("properties") or {}).items() if v.get("required")]),
           ("description", lambda i: (i.get("description") or "").split("\n")[0])]


@click.group("boot-interfaces")
def group():
    """Boot interfaces enabled on the server."""


@group.command("list")
@output.output_option
@click.pass_obj
def list_(obj, output_):
    """List the enabled boot interfaces."""
    items = obj.client.get("/v1/boot-interfaces")["boot_interfaces"]
    output.show(obj, output_, items, lambda xs: output.table(xs, COLUMNS))
