"""Fixtures for the CLI tests: a real metalboot-server and the real ``metalboot`` command.

The CLI runs as a subprocess (``python -m metalboot_framework.cli``, what the
``metalboot`` console script calls), so exit codes, stdout and stderr are
exactly what a user sees. Its environment is cleaned: no METALBOOT_* variable,
HOME and XDG dirs in tmp_path, so no user config or admin-token file leaks in.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import ADMIN, READER, free_port, machine_body  # noqa: F401

CLI = [sys.executable, "-m", "metalboot_framework.cli"]


class Result:
    def __init__(self, proc):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"<exit {self.code}\nstdout: {self.out}\nstderr: {self.err}>"


@pytest.fixture
def cli_env(tmp_path):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("METALBOOT_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_STATE_HOME=str(home / ".local" / "state"), COLUMNS="200")
    return env


@pytest.fixture
def run(cli_env):
    """run(*args, url=, token=, env=, input=) -> Result; url/token None: not passed."""

    def _run(*args, url=None, token=None, env=None, input=None, timeout=60):
        argv = list(CLI)
        if url:
            argv += ["--url", url]
        if token:
            argv += ["--token", token]
        proc = subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True,
                              env=dict(cli_env, **(env or {})), input=input, timeout=timeout)
        return Result(proc)

    return _run


@pytest.fixture
def server(server_factory):
    return server_factory(extra_conf="enabled_boot_interfaces = fake,fake-alt\n").start()


@pytest.fixture
def mb(run, server):
    """run() against ``server`` with the admin token."""

    def _mb(*args, token=ADMIN, **kw):
        return run(*args, url=server.url, token=token, **kw)

    return _mb


@pytest.fixture
def partition(server):
    r = server.request("POST", "/v1/partitions", json={"id": "p1"})
    assert r.status_code == 201, r.text
    return "p1"


def assert_one_line_error(result, code, *needles):
    """Exit ``code``, nothing on stdout, exactly one line on stderr holding ``needles``."""
    assert result.code == code, result
    assert "Traceback" not in result.err, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result
    for needle in needles:
        assert needle in lines[0], (needle, result)
    return lines[0]
