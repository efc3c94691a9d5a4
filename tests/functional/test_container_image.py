"""The Containerfile, built with buildah and run; the systemd units booted.

No container registry is reachable here, so the base image is made the way
Debian's own images are: ``debootstrap --variant=minbase bookworm`` into a
directory, imported with ``buildah`` as ``localhost/metalboot-base:bookworm``
(kept between runs) and passed as the Containerfile's ``BASE``; the build
then installs Debian's Python and metalboot with the pinned versions as it
would on any Debian 12 base. Then:

- the image's three services start from it (``buildah run --isolation
  chroot``: the host's network) on one state volume, and work together;
- the units of etc/systemd, unchanged, run the same three services under a
  real systemd: ``systemd-nspawn --boot`` on the image with Debian's systemd
  added, whose /opt/metalboot is where the units look.

Needs root, buildah, debootstrap and systemd-nspawn (``.ci/run`` installs
them); a run takes a few minutes (apt and pip inside the build, debootstrap
the first time).
"""

import json
import os
import shutil
import signal
import subprocess
import tarfile
import time

import pytest
import requests

from metalboot_framework.store.db import Database
from metalboot_framework.tokens import TokenSigner
from tests.conftest import free_port

pytestmark = [pytest.mark.functional, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = "localhost/metalboot-base:bookworm"
SITE_BASE = "localhost/metalboot-base:bookworm-site"
IMAGE = "localhost/metalboot:test"
ADMIN = "container-test-admin-token"


def tool(name):
    path = shutil.which(name)
    if path is None:  # a failure, not a skip: CI installs them
        pytest.fail(f"{name} is not installed (.ci/run installs buildah, debootstrap and "
                    f"systemd-container)")
    return path


def buildah(*args, timeout=900, check=True):
    out = subprocess.run([tool("buildah"), *args], capture_output=True, text=True,
                         timeout=timeout)
    if check:
        assert out.returncode == 0, f"buildah {' '.join(args)}:\n{out.stdout[-3000:]}" \
                                    f"\n{out.stderr[-3000:]}"
    return out


def ensure_base(tmp_path):
    """A Debian 12 base image from debootstrap, unless an earlier run made it."""
    if buildah("inspect", "--type", "image", BASE, check=False).returncode == 0:
        return
    rootfs = tmp_path / "rootfs"
    try:
        out = subprocess.run([tool("debootstrap"), "--variant=minbase", "bookworm",
                              str(rootfs)], capture_output=True, text=True, timeout=1200)
    finally:
        # debootstrap mounts /proc and /sys in the root while it installs; one
        # that failed or timed out may leave them there
        for mount in ("proc", "sys"):
            if os.path.ismount(rootfs / mount):
                subprocess.run(["umount", "--lazy", str(rootfs / mount)], check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    archive = tmp_path / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    shutil.rmtree(rootfs)
    container = buildah("from", "scratch").stdout.strip()
    try:
        buildah("add", container, str(archive), "/")
        buildah("config", "--cmd", "/bin/bash", container)
        buildah("commit", container, BASE)
    finally:
        buildah("rm", container, check=False)
    archive.unlink()


def site_base():
    """The base with this machine's own certificate authorities
    (/usr/local/share/ca-certificates: a TLS-inspecting proxy's, say), as a
    site adds them to its images, so that pip in the build trusts what the
    host trusts; installing ca-certificates in the build adds them to the
    system bundle, which pip is then told to use."""
    container = buildah("from", BASE).stdout.strip()
    try:
        local = "/usr/local/share/ca-certificates"
        for name in sorted(os.listdir(local)) if os.path.isdir(local) else []:
            if name.endswith(".crt"):
                buildah("copy", container, os.path.join(local, name), f"{local}/{name}")
        buildah("config", "--env", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt", container)
        buildah("commit", container, SITE_BASE)
    finally:
        buildah("rm", container, check=False)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    ensure_base(tmp_path_factory.mktemp("base"))
    site_base()
    buildah("build", "--isolation", "chroot", "--build-arg", f"BASE={SITE_BASE}",
            "-f", os.path.join(ROOT, "Containerfile"), "-t", IMAGE, ROOT, timeout=1800)
    yield IMAGE
    buildah("rmi", IMAGE, SITE_BASE, check=False)


def test_image_config(image):
    config = json.loads(buildah("inspect", "--type", "image", image).stdout)["OCIv1"]["config"]
    assert config["User"] == "metalboot"
    assert "/var/lib/metalboot" in config["Volumes"]
    assert config["Cmd"] == ["metalboot-api", "--config-file", "/etc/metalboot/metalboot.conf"]
    assert "METALBOOT_STATE_DIR=/var/lib/metalboot" in config["Env"]
    assert set(config["ExposedPorts"]) == {"6480/tcp", "6481/tcp"}


@pytest.fixture
def container(image):
    name = buildah("from", image).stdout.strip()
    # buildah run (1.28) mounts an anonymous volume for the image's VOLUME and
    # the --volume given for the same path in no fixed order: one service got
    # the anonymous one. Its declaration is checked above; here only the
    # --volume is wanted.
    buildah("config", "--volume", "/var/lib/metalboot-", name)
    yield name
    buildah("rm", name, check=False)


def services_conf(tmp_path):
    """The three services' configuration file, on free loopback ports; the
    machines' URLs lead to the boot server."""
    api_port, boot_port = free_port(), free_port()
    conf = tmp_path / "metalboot.conf"
    conf.write_text(
        "[DEFAULT]\nenabled_boot_interfaces = fake,fake-alt\n"
        f"[api]\nhost_ip = 127.0.0.1\nport = {api_port}\nadmin_tokens = {ADMIN}\n"
        f"public_url = http://127.0.0.1:{boot_port}\n"
        f"[boot_server]\nhost_ip = 127.0.0.1\nport = {boot_port}\n"
        "[conductor]\npoll_interval = 0.1\n")
    return conf, api_port, boot_port


def run_in(container, *argv, volumes=()):
    command = [tool("buildah"), "run", "--isolation", "chroot"]
    for volume in volumes:
        command += ["--volume", volume]
    return command + [container, "--", *argv]


def test_the_three_services_run_from_the_image_on_one_state_volume(container, tmp_path):
    uid = subprocess.run(run_in(container, "id", "-u"), capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip()
    assert uid.isdigit() and int(uid) != 0  # the image's user, not root
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, int(uid), int(uid))
    conf, api_port, boot_port = services_conf(tmp_path)
    volumes = [f"{state}:/var/lib/metalboot", f"{conf}:/etc/metalboot/metalboot.conf:ro"]
    procs, logs = {}, {}
    try:
        for name in ("metalboot-api", "metalboot-conductor", "metalboot-boot-server"):
            argv = [name, "--config-file", "/etc/metalboot/metalboot.conf"]
            logs[name] = open(tmp_path / f"{name}.log", "wb")
            procs[name] = subprocess.Popen(run_in(container, *argv, volumes=volumes),
                                           stdout=logs[name], stderr=subprocess.STDOUT,
                                           start_new_session=True)
            if name == "metalboot-api":
                wait_http(f"http://127.0.0.1:{api_port}/v1", procs[name], tmp_path, name)
        wait_http(f"http://127.0.0.1:{boot_port}/boot/mac/52:54:00:00:00:01/fake/boot.ipxe",
                  procs["metalboot-boot-server"], tmp_path, "metalboot-boot-server",
                  status=404)
        headers = {"Authorization": f"Bearer {ADMIN}"}
        api = f"http://127.0.0.1:{api_port}"
        assert requests.post(f"{api}/v1/partitions", json={"id": "p1"}, headers=headers,
                             timeout=30).status_code == 201
        body = {"id": "4c4c4544-0000-1000-8000-000000000001", "partition": "p1",
                "nics": [{"mac": "52:54:00:00:00:01"}]}
        assert requests.post(f"{api}/v1/machines", json=body, headers=headers,
                             timeout=30).status_code == 201
        # the conductor in the image enrols it: the three share the volume's database
        deadline = time.monotonic() + 60
        while True:
            machine = requests.get(f"{api}/v1/machines/{body['id']}", headers=headers,
                                   timeout=30).json()
            if machine["state"] == "ready":
                break
            assert time.monotonic() < deadline, machine
            assert procs["metalboot-conductor"].poll() is None, read_log(tmp_path,
                                                                        "metalboot-conductor")
            time.sleep(0.2)
        # ... and the boot server serves its boot script from there, as the
        # URL a migration would give the machine
        db = Database(f"sqlite:///{state}/metalboot.sqlite")
        try:
            token = TokenSigner.from_database(db).machine_token(body["id"], 1, "fake")
        finally:
            db.dispose()
        r = requests.get(f"http://127.0.0.1:{boot_port}/boot/{body['id']}/fake/{token}/"
                         "boot.ipxe", timeout=30)
        assert r.status_code == 200 and r.text.startswith("#!ipxe"), (r.status_code, r.text)
        # the state is in the volume, written by the image's user
        database = state / "metalboot.sqlite"
        assert database.exists() and database.stat().st_uid == int(uid)
    finally:
        for proc in procs.values():
            # SIGTERM to the service itself, as a container runtime's stop sends
            # it to the container's process (buildah's chroot runtime would
            # answer one with SIGKILL to its child)
            for pid in service_processes(proc.pid).values():
                os.kill(pid, signal.SIGTERM)
        for name, proc in procs.items():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            logs[name].close()
    for name in procs:
        assert f"{name} stopped" in read_log(tmp_path, name), read_log(tmp_path, name)[-2000:]


def read_log(tmp_path, name):
    return (tmp_path / f"{name}.log").read_text(errors="replace")


def wait_http(url, proc, tmp_path, name, status=200, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, read_log(tmp_path, name)
        try:
            if requests.get(url, timeout=5).status_code == status:
                return
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, read_log(tmp_path, name)
        time.sleep(0.2)


def children_of(pid):
    """Every process below ``pid`` (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        todo += kids
    return found


def service_processes(ancestor):
    """{console script: pid} of the metalboot interpreters below ``ancestor``
    (not buildah's chroot helper, whose arguments name the script too)."""
    found = {}
    for pid in children_of(ancestor):
        argv = cmdline_of(pid)
        if len(argv) > 1 and os.path.basename(argv[0]).startswith("python") \
                and argv[1].startswith("/opt/metalboot/bin/metalboot-"):
            found[argv[1].rsplit("/", 1)[1]] = pid
    return found


def status_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def cmdline_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_the_systemd_units_run_the_services_sandboxed(image, tmp_path):
    """etc/systemd's units, unchanged, booted by a real systemd: systemd-nspawn
    boots the image with Debian's systemd added (the units' /opt/metalboot is
    the image's). The three services run as the metalboot user with no
    capability, no new privileges and a seccomp filter, and a migration goes
    through them: enrolment and steps in the conductor, the machine's fetch
    recorded by the boot server."""
    name = buildah("from", image).stdout.strip()
    nspawn = None
    try:
        buildah("run", "--isolation", "chroot", "--user", "root", name, "--", "sh", "-c",
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                "--no-install-recommends systemd systemd-sysv dbus >/dev/null")
        for unit in sorted(os.listdir(os.path.join(ROOT, "etc", "systemd"))):
            if unit.endswith(".service"):
                buildah("copy", name, os.path.join(ROOT, "etc", "systemd", unit),
                        f"/etc/systemd/system/{unit}")
        buildah("copy", name, os.path.join(ROOT, "etc", "sysusers.d", "metalboot.conf"),
                "/usr/lib/sysusers.d/metalboot.conf")
        conf, api_port, boot_port = services_conf(tmp_path)
        buildah("copy", name, str(conf), "/etc/metalboot/metalboot.conf")
        buildah("run", "--isolation", "chroot", "--user", "root", name, "--", "systemctl",
                "enable", *(f"metalboot-{s}.service" for s in ("api", "conductor",
                                                                "boot-server")))
        root = buildah("mount", name).stdout.strip()
        log = open(tmp_path / "nspawn.log", "wb")
        # the host's network (127.0.0.1 is the test's); no machined, no host
        # systemd to ask for a scope: --register=no --keep-unit
        nspawn = subprocess.Popen(
            [tool("systemd-nspawn"), "-D", root, "--boot", "--register=no", "--keep-unit",
             "--console=pipe", "--machine=metalboot-units-test"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        api = f"http://127.0.0.1:{api_port}"
        wait_http(f"{api}/v1", nspawn, tmp_path, "nspawn")
        # the fake machine fetches its boot URL once, right after activation:
        # the boot server must be listening by then
        wait_http(f"http://127.0.0.1:{boot_port}/boot/mac/52:54:00:00:00:01/fake/boot.ipxe",
                  nspawn, tmp_path, "nspawn", status=404)
        services = service_processes(nspawn.pid)
        assert set(services) == {"metalboot-api", "metalboot-conductor",
                                 "metalboot-boot-server"}, services
        for service, pid in services.items():
            status = status_of(pid)
            assert status["Uid"].split()[0] != "0", (service, status["Uid"])
            assert (status["CapEff"], status["CapBnd"], status["CapAmb"]) == (
                "0000000000000000",) * 3, service
            assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", service
            # ProtectSystem=strict: the file system read-only but for the state
            with open(f"/proc/{pid}/mountinfo") as f:
                mounts = {fields[4]: fields[5].split(",") for fields in
                          (line.split() for line in f)}
            assert "ro" in mounts["/"] and "rw" in mounts["/var/lib/metalboot"], service
        headers = {"Authorization": f"Bearer {ADMIN}"}
        assert requests.post(f"{api}/v1/partitions", json={"id": "p1"}, headers=headers,
                             timeout=30).status_code == 201
        mid = "4c4c4544-0000-1000-8000-000000000001"
        body = {"id": mid, "partition": "p1", "nics": [{"mac": "52:54:00:00:00:01"}],
                "properties": {"fake_autoboot": True}}
        assert requests.post(f"{api}/v1/machines", json=body, headers=headers,
                             timeout=30).status_code == 201
        wait_until(lambda: requests.get(f"{api}/v1/machines/{mid}", headers=headers,
                                        timeout=30).json()["state"] == "ready")
        r = requests.post(f"{api}/v1/migrations", headers=headers, timeout=30, json={
            "selector": {"machines": [mid]}, "boot_interface": "fake-alt"})
        assert r.status_code == 202, r.text
        migration = f"{api}/v1/migrations/{r.json()['id']}"
        wait_until(lambda: requests.get(migration, headers=headers,
                                        timeout=30).json()["finished_at"])
        assert requests.get(migration, headers=headers, timeout=30).json()["counts"] == {
            "done": 1}
        evidence = requests.get(f"{api}/v1/machines/{mid}/evidence", headers=headers,
                                timeout=30).json()["evidence"]
        assert [(e["interface"], e["path"]) for e in evidence] == [("fake-alt", "boot.ipxe")]
        # none of them was restarted by systemd on the way
        for service, pid in services.items():
            assert os.path.exists(f"/proc/{pid}"), service
    finally:
        if nspawn is not None:
            if nspawn.poll() is None:
                nspawn.terminate()  # systemd-nspawn halts the container's systemd
            try:
                nspawn.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(nspawn.pid, signal.SIGKILL)
                nspawn.wait()
            log.close()
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def wait_until(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
