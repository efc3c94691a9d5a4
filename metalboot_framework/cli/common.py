"""Helpers shared by the command groups."""

import json
import os
import sys

import click

from metalboot_framework.cli.client import EXIT_USAGE, CliError

BMC_PASSWORD_ENV = "METALBOOT_BMC_PASSWORD"


def parse_properties(values, option="--property"):
    """``key=value`` pairs; a value that parses as JSON is taken as JSON."""
    out = {}
    for item in values or ():
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        out[key.strip()] = json_or_string(raw)
    return out


def json_or_string(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def bmc_password(from_stdin, prompt, username_given):
    """The BMC password from stdin, a hidden prompt or $METALBOOT_BMC_PASSWORD; never argv."""
    if from_stdin and prompt:
        raise click.UsageError("give --bmc-password-stdin or --bmc-password-prompt, not both")
    if from_stdin:
        line = sys.stdin.readline()
        password = line.rstrip("\r\n")
        if not password:
            raise CliError("--bmc-password-stdin: nothing on standard input", EXIT_USAGE)
        return password
    if prompt:
        return click.prompt("BMC password", hide_input=True, err=True)
    if os.environ.get(BMC_PASSWORD_ENV):
        return os.environ[BMC_PASSWORD_ENV]
    return None


def drop_none(d):
    return {k: v for k, v in d.items() if v is not None}
