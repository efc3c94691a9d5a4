"""A minimal metal-hammer for the e2e tests: a Debian kernel and a busybox initramfs.

What the real metal-hammer does first, and what proves a whole boot: take the
address the boot network gives (SLAAC, DHCPv6, or DHCPv4 on the legacy path),
read ``METAL_*`` from the kernel command line that ``boot.ipxe`` passed, and
post the boot report with the machine's token. Then it powers the machine off.

Built from Debian packages fetched with ``apt-get download`` (the system's
suite; no installation): ``linux-image-<abi>-amd64`` (its virtio network
driver is a module, so the modules it needs go into the initramfs, in the
order of their ``depends=``) and ``busybox-static``. The initramfs is a
``newc`` cpio archive written here, gzip-compressed. Both files are cached in
``$METALBOOT_E2E_CACHE`` (default ``~/.cache/metalboot-e2e``) under a name
that changes with the packages' versions and with :data:`INIT`;
``METALBOOT_E2E_METAL_HAMMER_DIR`` points at a directory with ``vmlinuz`` and
``initrd.img`` instead.

Usage: ``python tests/e2e/metal_hammer.py [CACHE]`` prints the directory.
Builds into one cache from several processes at once (``pytest -n``) take
turns under a lock of the cache (:func:`cache_lock`).
"""

import contextlib
import fcntl
import glob
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys

#: The NIC driver and what it needs, loaded in this order (checked against the
#: modules' own ``depends=`` when the image is built).
MODULES = ["virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
           "virtio_pci", "failover", "net_failover", "virtio_net"]

#: /init: the part of metal-hammer that proves the boot (busybox sh).
INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec >/dev/console 2>&1
say() { echo "metal-hammer-e2e: $*"; }
t0=$(cut -d' ' -f1 /proc/uptime)
for m in $(cat /etc/modules.order); do insmod /lib/modules/$m.ko || say "insmod $m failed"; done
for word in $(cat /proc/cmdline); do
  case "$word" in METAL_*=*) export "$word";; esac
done
say "machine $METAL_MACHINE_ID interface $METAL_BOOT_INTERFACE"
ip link set lo up
ip link set eth0 up
case "$METAL_BOOT_REPORT_URL" in
  http://\[*|https://\[*) family=6 ;;
  *) family=4 ;;
esac
address=""
if [ $family = 4 ]; then
  udhcpc -i eth0 -n -q -t 10 -s /etc/udhcpc.script && how=dhcpv4
  address=$(ip -4 -o addr show dev eth0 scope global | awk '{print $4}')
else
  # SLAAC (radvd): the kernel configures the address itself; DHCPv6 when the
  # RA says M (managed) or SLAAC brought nothing.
  i=0
  while [ $i -lt 60 ]; do
    address=$(ip -6 -o addr show dev eth0 scope global | grep -v tentative | awk '{print $4}')
    [ -n "$address" ] && how=slaac && break
    if [ $i = 20 ]; then udhcpc6 -i eth0 -n -q -t 5 -s /etc/udhcpc.script && how=dhcpv6; fi
    sleep 0.25; i=$((i + 1))
  done
  address=$(ip -6 -o addr show dev eth0 scope global | grep -v tentative | awk '{print $4}')
fi
ipv4=$(ip -4 -o addr show dev eth0 | awk '{print $4}')
say "address ${address:-none} by ${how:-nothing}; ipv4 ${ipv4:-none}; uptime $t0"
message="metal-hammer-e2e $(uname -r) address ${address:-none} by ${how:-nothing}"
message="$message ipv4 ${ipv4:-none}"
body="{\"boot_interface\": \"$METAL_BOOT_INTERFACE\", \"message\": \"$message\"}"
n=0
until wget -q -O /tmp/answer --header "Authorization: Bearer $METAL_BOOT_TOKEN" \
    --header "Content-Type: application/json" --post-data "$body" "$METAL_BOOT_REPORT_URL"; do
  n=$((n + 1)); [ $n -ge 5 ] && break; sleep 1
done
say "boot report answer: $(cat /tmp/answer 2>/dev/null)"
say "powering off"
poweroff -f
"""

#: udhcpc/udhcpc6 script: put the leased address on the interface.
UDHCPC_SCRIPT = r"""#!/bin/busybox sh
case "$1" in
  bound|renew)
    if [ -n "$ipv6" ]; then ip -6 addr add "$ipv6/128" dev "$interface"
    else ip addr add "$ip/${mask:-24}" dev "$interface"
         [ -n "$router" ] && ip route add default via ${router%% *}
    fi ;;
esac
exit 0
"""


class BuildError(RuntimeError):
    pass


def _run(cmd, cwd=None):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise BuildError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


def kernel_package():
    """The versioned kernel package linux-image-amd64 depends on."""
    for line in _run(["apt-cache", "depends", "linux-image-amd64"]).splitlines():
        line = line.strip()
        if line.startswith("Depends: linux-image-"):
            return line.split()[-1]
    raise BuildError("apt-cache depends linux-image-amd64 names no linux-image-*-amd64")


def _download(package, dest):
    os.makedirs(dest, exist_ok=True)
    _run(["apt-get", "-qq", "-o", "APT::Sandbox::User=root", "download", package], cwd=dest)
    debs = sorted(glob.glob(os.path.join(dest, f"{package}_*.deb")))
    if not debs:
        raise BuildError(f"apt-get download {package} left no .deb in {dest}")
    return debs[-1]


def module_depends(path):
    """The ``depends=`` of a kernel module, from its .modinfo strings."""
    with open(path, "rb") as f:
        data = f.read()
    marker = data.find(b"depends=")
    if marker < 0:
        return []
    value = data[marker + len(b"depends="):data.index(b"\0", marker)].decode()
    return [d for d in value.split(",") if d]


def cpio_newc(entries):
    """A newc cpio archive of ``entries``: (name, mode, data or None for a dir)."""
    out = io.BytesIO()

    def add(ino, name, mode, data):
        name_b = name.encode() + b"\0"
        head = b"070701" + b"".join(f"{v:08X}".encode() for v in (
            ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_b), 0))
        out.write(head + name_b)
        out.write(b"\0" * (-(len(head) + len(name_b)) % 4))
        out.write(data)
        out.write(b"\0" * (-len(data) % 4))
    for ino, (name, mode, data) in enumerate(entries, start=1):
        add(ino, name, mode, b"" if data is None else data)
    add(0, "TRAILER!!!", 0, b"")
    return out.getvalue()


def cache_dir():
    """Where the e2e tests cache what they fetch and build."""
    return os.environ.get("METALBOOT_E2E_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "metalboot-e2e")


@contextlib.contextmanager
def cache_lock(name, cache=None):
    """Held while one process fetches or builds ``name`` into the cache: the
    others wait for it, then find it there."""
    cache = cache or cache_dir()
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, f".{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(cache=None):
    """The directory with ``vmlinuz`` and ``initrd.img`` (built once, cached)."""
    env = os.environ.get("METALBOOT_E2E_METAL_HAMMER_DIR")
    if env:
        return env
    cache = cache or cache_dir()
    with cache_lock("metal-hammer", cache):
        return _build(cache)


def _build(cache):
    kernel_pkg = kernel_package()
    recipe = hashlib.sha256((INIT + UDHCPC_SCRIPT + " ".join(MODULES)).encode()).hexdigest()
    out = os.path.join(cache, "metal-hammer", f"{kernel_pkg}-{recipe[:12]}")
    if all(os.path.isfile(os.path.join(out, f)) for f in ("vmlinuz", "initrd.img")):
        return out
    debs = os.path.join(cache, "metal-hammer", "debs")
    work = out + ".work"
    shutil.rmtree(work, ignore_errors=True)
    for package in (kernel_pkg, "busybox-static"):
        _run(["dpkg-deb", "-x", _download(package, debs), work])
    vmlinuz = glob.glob(os.path.join(work, "boot", "vmlinuz-*"))
    busybox = os.path.join(work, "bin", "busybox")
    if not vmlinuz or not os.path.isfile(busybox):
        raise BuildError(f"{work}: no boot/vmlinuz-* or bin/busybox after unpacking")
    modules = {}
    for path in glob.glob(os.path.join(work, "lib", "modules", "*", "kernel", "**", "*.ko"),
                          recursive=True):
        modules[os.path.basename(path)[:-3].replace("-", "_")] = path
    loaded = []
    for name in MODULES:
        if name not in modules:
            raise BuildError(f"{kernel_pkg} has no module {name}")
        missing = [d for d in module_depends(modules[name]) if d not in loaded]
        if missing:
            raise BuildError(f"module {name} needs {missing} loaded before it")
        loaded.append(name)
    entries = [(d, 0o040755, None) for d in ("bin", "dev", "etc", "lib", "lib/modules",
                                             "proc", "sys", "tmp")]
    with open(busybox, "rb") as f:
        entries.append(("bin/busybox", 0o100755, f.read()))
    entries += [("init", 0o100755, INIT.encode()),
                ("etc/udhcpc.script", 0o100755, UDHCPC_SCRIPT.encode()),
                ("etc/modules.order", 0o100644, "\n".join(MODULES).encode() + b"\n")]
    for name in MODULES:
        with open(modules[name], "rb") as f:
            entries.append((f"lib/modules/{name}.ko", 0o100644, f.read()))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "initrd.img.tmp"), "wb") as f:
        f.write(gzip.compress(cpio_newc(entries), 6))
    shutil.copyfile(vmlinuz[0], os.path.join(out, "vmlinuz.tmp"))
    for name in ("initrd.img", "vmlinuz"):
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
    shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else None))
