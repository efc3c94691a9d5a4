"""``metalboot events``: the server's event feed."""

import collections
import json
import time

import click

from metalboot_framework.cli import output


def format_event(event):
    who = event.get("machine_id") or event.get("migration_id") or "-"
    return f"{event['created_at']}  #{event['id']:<6} {event['kind']:<30} {who}  " \
           f"{' '.join(str(event.get('message') or '').split())}"


def _page(client, since, machine, migration, limit=1000):
    return client.get("/v1/events", since=since, limit=limit, machine_id=machine,
                      migration_id=migration)


@click.group("events")
def group():
    """Machine and migration events."""


@group.command("tail")
@click.option("-n", "--lines", type=click.IntRange(min=0), default=20, show_default=True,
              help="How many of the latest events to show first.")
@click.option("--since", type=click.IntRange(min=0),
              help="Show every event after this cursor (event id) instead of the latest.")
@click.option("-f", "--follow", is_flag=True, help="Keep polling for new events (Ctrl-C stops).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between polls with --follow.")
@click.option("--machine", "machine", help="Only events of this machine.")
@click.option("--migration", "migration", help="Only events of this migration.")
@output.output_option
@click.pass_obj
def tail(obj, lines, since, follow, interval, machine, migration, output_):
    """Show the latest events; with --follow, keep printing new ones.

    With --output json, one JSON object per line (JSON Lines).
    """
    client = obj.client
    as_json = output.fmt(obj, output_) == "json"

    def emit(event):
        click.echo(json.dumps(event) if as_json else format_event(event))

    cursor = since or 0
    if since is None:
        latest = collections.deque(maxlen=lines)
        while True:
            body = _page(client, cursor, machine, migration)
            latest.extend(body["events"])
            cursor = body["next_cursor"]
            if not body["events"]:
                break
        for event in latest:
            emit(event)
    else:
        while True:
            body = _page(client, cursor, machine, migration)
            for event in body["events"]:
                emit(event)
            cursor = body["next_cursor"]
            if not body["events"]:
                break
    if not follow:
        return
    try:
        while True:
            body = _page(client, cursor, machine, migration)
            for event in body["events"]:
                emit(event)
            cursor = body["next_cursor"]
            if not body["events"]:
                time.sleep(interval)
    except KeyboardInterrupt:
        raise SystemExit(130)
