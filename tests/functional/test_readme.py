"""The README's first flow, run from the README's own text.

Its shell blocks are run as written by bash, against a metalboot-server with
no configuration file, in a home directory of the test's own (the server's
state and admin token at ``~/.local/state/metalboot``, where the CLI looks),
in a network namespace of the test's own, so that the README's fixed address
``127.0.0.1:6480`` is free and reaches only that server. The only commands not
run are the README's install steps: the test runs in the environment it was
installed in, or, when METALBOOT_TEST_VENV names one, in that virtual
environment (.ci/wheel-check installs the built wheel there, as users get it).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

README = Path(__file__).parents[2] / "README.md"
VENV = "python3 -m venv .venv && . .venv/bin/activate"
INSTALL = "pip install . && "
START = INSTALL + "metalboot-server"
FLOW = "A first migration, without hardware"
MACHINES = ("4c4c4544-0000-1000-8000-000000000001", "4c4c4544-0000-1000-8000-000000000002")
# the virtual environment whose console scripts the flow runs
BIN = Path(os.environ["METALBOOT_TEST_VENV"], "bin") if os.environ.get(
    "METALBOOT_TEST_VENV") else Path(sys.executable).parent


def section(text, title):
    """The text of README section ``## title``, up to the next ``## ``."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def sh_blocks(text):
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S)]


# After the README's commands: wait until both machines it migrated are on
# fake-alt with evidence and both migrations have finished (the REST migration
# is not watched by the README), and report what the API says about them.
CHECK = r"""
python - <<'EOF'
import json, os, time, urllib.request
token = open(os.path.expanduser("~/.local/state/metalboot/admin-token")).read().strip()
def get(path):
    req = urllib.request.Request("http://127.0.0.1:6480/v1" + path,
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)
ids = %s
deadline = time.monotonic() + 30
while True:
    machines = {i: get("/machines/" + i) for i in ids}
    evidence = {i: get("/machines/%%s/evidence" %% i)["evidence"] for i in ids}
    migrations = get("/migrations")["migrations"]
    if all(m["boot_interface"] == "fake-alt" and m["state"] == "ready"
           for m in machines.values()) and all(
           m["finished_at"] for m in migrations) or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print("RESULT " + json.dumps({"machines": machines, "evidence": evidence,
                              "migrations": migrations}))
EOF
"""


def flow_script(text):
    """A bash script: the README's server start, then its flow's blocks in order."""
    install = sh_blocks(section(text, "Install and run"))
    assert install[:2] == [VENV, START], install
    blocks = sh_blocks(section(text, FLOW))
    assert len(blocks) >= 4, blocks
    lines = ["set -euo pipefail", "ip link set lo up",
             # the README's start command, after its pip install
             f'{START[len(INSTALL):]} > "$HOME/server.log" 2>&1 &',
             "server=$!", 'trap \'kill "$server"; wait "$server" || true\' EXIT',
             "until curl -sf -o /dev/null http://127.0.0.1:6480/v1; do",
             '  kill -0 "$server"; sleep 0.2', "done"]
    for n, block in enumerate(blocks):
        lines += [f"echo '=== block {n}'", block]
    lines.append(CHECK % json.dumps(list(MACHINES)))
    return "\n".join(lines) + "\n"


def test_readme_links_every_documentation_page_and_nothing_missing():
    """The README is where a user starts: every page of doc/ is one link away
    (doc/index.rst is Sphinx's table of contents), and no link leads nowhere."""
    text = README.read_text()
    root = README.parent
    # a link's target, without its #section
    targets = set(re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text))
    assert not sorted(t for t in targets if not (root / t).exists()), "links that lead nowhere"
    pages = {str(p.relative_to(root)) for p in (root / "doc").rglob("*.rst")}
    assert {"doc/install.rst", "doc/runbook.rst"} <= pages
    assert not sorted(pages - targets - {"doc/index.rst"}), "pages the README does not link"


@pytest.mark.functional
def test_readme_first_flow_works_as_written(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace of its own (CI runs as root)")
    for tool in ("unshare", "ip", "curl"):
        assert shutil.which(tool), f"{tool} is missing (.ci/run installs it)"
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "flow.sh"
    script.write_text(flow_script(README.read_text()))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("METALBOOT_", "XDG_", "OS_"))}
    env.update(HOME=str(home), PATH=f"{BIN}:{env.get('PATH', '')}")
    started = time.monotonic()
    # a process group of its own: on a timeout the server goes with the script
    proc = subprocess.Popen(["unshare", "--net", "bash", str(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    elapsed = time.monotonic() - started
    log = (home / "server.log").read_text() if (home / "server.log").exists() else ""
    report = f"{stdout}\n{stderr}\n--- server log:\n{log[-4000:]}"
    assert proc.returncode == 0, report
    assert "Traceback" not in stdout + stderr + log, report

    # the CLI's watch saw the migration finish with its machine done
    assert re.search(r"migration \S+ done, succeeded: done 1", stdout), report
    result = json.loads(stdout.split("RESULT ", 1)[1])
    for machine_id in MACHINES:
        machine = result["machines"][machine_id]
        assert (machine["boot_interface"], machine["state"]) == ("fake-alt", "ready"), machine
        kinds = {(e["interface"], e["kind"], e["path"]) for e in result["evidence"][machine_id]}
        assert ("fake-alt", "fetch", "boot.ipxe") in kinds, result["evidence"]
    assert [m["state"] for m in result["migrations"]] == ["done", "done"], result["migrations"]
    # the README's evidence command printed the proof
    assert '"interface":"fake-alt","kind":"fetch","path":"boot.ipxe"' in stdout, report
    assert elapsed < 60, f"the first flow took {elapsed:.0f} s"
