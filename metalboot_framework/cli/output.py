"""Rendering: aligned tables for people, JSON for programs (``--output json``)."""

import json

import click

FORMATS = ("table", "json")


def output_option(f):
    """``-o/--output table|json`` on a command; overrides the one given to ``metalboot``."""
    return click.option("-o", "--output", "output_", type=click.Choice(FORMATS),
                        default=None, help="Output format (default: table).")(f)


def fmt(ctx_obj, given):
    return given or ctx_obj.output or "table"


def emit_json(data):
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={_cell(v)}" for k, v in value.items()) or "-"
    return " ".join(str(value).split())


def table(rows, columns):
    """Print ``rows`` (dicts) as columns; ``columns`` is [(header, key or callable)]."""
    cells = [[_cell(key(row) if callable(key) else row.get(key)) for _, key in columns]
             for row in rows]
    headers = [h for h, _ in columns]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def details(obj, keys=None):
    """Print one object as ``key: value`` lines (nested dicts indented)."""
    keys = keys or list(obj)
    width = max(len(k) for k in keys) if keys else 0

    for key in keys:
        value = obj.get(key)
        if isinstance(value, dict) and value:
            click.echo(f"{key}:")
            inner = max(len(str(k)) for k in value)
            for k, v in value.items():
                click.echo(f"  {str(k).ljust(inner)}  {_cell(v)}")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            click.echo(f"{key}:")
            for item in value:
                click.echo("  - " + ", ".join(f"{k}={_cell(v)}" for k, v in item.items()
                                               if v is not None))
        else:
            click.echo(f"{key.ljust(width)}  {_cell(value)}")


def show(ctx_obj, given, data, render):
    """JSON as the API gave it, or ``render(data)`` for a table."""
    if fmt(ctx_obj, given) == "json":
        emit_json(data)
    else:
        render(data)
