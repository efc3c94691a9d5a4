"""The iPXE ISO: an EFI-bootable ISO 9660 image holding iPXE and autoexec.ipxe.

Layout (what UEFI firmware and iPXE need):

- an El Torito boot catalog with one no-emulation entry, platform 0xEF (EFI),
  pointing at ``efi.img``;
- ``efi.img``: a FAT image (mkfs.vfat + mtools) with ``/EFI/BOOT/BOOTX64.EFI``
  (the iPXE binary, the path UEFI boots removable media from) and
  ``/autoexec.ipxe``, which iPXE (trixie's build or newer) runs from the medium
  it was loaded from;
- ``/autoexec.ipxe`` in the ISO 9660 tree as well, for people reading the ISO.

One ISO per partition, interface and configuration: it carries no machine
identity (the script chains boot.ipxe by MAC), so it is built once and cached
under ``[artifacts] cache_dir/metalboot_redfish/`` by the hash of its inputs.
"""

import hashlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import threading

import jinja2
import pycdlib

from metalboot_framework import ipxe
from metalboot_framework.exceptions import BootInterfaceError
from metalboot_redfish import conf as redfish_conf

#: Bumped when the layout changes, so that cached ISOs are rebuilt.
LAYOUT_VERSION = "1"
TEMPLATE_DIR = os.path.join(os.path.dirname(__file__), "templates")
ISO_NAME_RE = re.compile(r"^ipxe-([0-9a-f]{16})\.iso$")
CACHE_SUBDIR = "metalboot_redfish"

_build_locks = {}
_build_locks_lock = threading.Lock()

# Every prepare and activate names the ISO, i.e. renders the script and hashes
# the iPXE binary: both are kept between calls. [artifacts] template_dir ->
# jinja2 Environment (which caches compiled templates and reloads changed
# files); iPXE path -> (its stat, content, SHA-256).
_environments = {}
_ipxe_files = {}


def _environment(template_dir):
    env = _environments.get(template_dir)
    if env is None:
        loaders = [jinja2.FileSystemLoader(TEMPLATE_DIR)]
        if template_dir:
            loaders.insert(0, jinja2.FileSystemLoader(template_dir))
        env = _environments[template_dir] = ipxe.script_environment(
            jinja2.ChoiceLoader(loaders))
    return env


def render_script(services, partition, interface):
    """The autoexec.ipxe for a partition (PartitionInfo) and interface (chains
    boot.ipxe by MAC from the partition's boot URL)."""
    conf = services.conf
    opts = redfish_conf.get(conf)
    env = _environment(conf.artifacts.template_dir)
    url = services.mac_boot_script_url(interface, mac_variable="${net${idx}/mac}",
                                       partition=partition)
    return env.get_template(opts.ipxe_script_template).render(
        interface=interface, partition_id=partition.id, boot_script_url=url,
        configurators=list(opts.ipxe_configurators))


def _read_ipxe(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise BootInterfaceError(
            f"cannot read the iPXE EFI binary [redfish] ipxe_efi_path={path}: "
            f"{exc.strerror}; install Debian trixie's ipxe package or point the "
            f"option at an ipxe.efi") from None
    if data[:2] != b"MZ":
        raise BootInterfaceError(f"[redfish] ipxe_efi_path={path} is not an EFI (PE) "
                                 f"binary")
    return data


def _ipxe_and_digest(path):
    """(content, SHA-256) of the iPXE binary, read again only when it changed."""
    try:
        st = os.stat(path)
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None  # _read_ipxe names the error
    known = _ipxe_files.get(path)
    if stamp is not None and known is not None and known[0] == stamp:
        return known[1], known[2]
    data = _read_ipxe(path)
    digest = hashlib.sha256(data).digest()
    _ipxe_files[path] = (stamp, data, digest)
    return data, digest


class IsoSpec:
    """Everything an ISO is built from; its hash names the cached file."""

    def __init__(self, ipxe_efi_path, script, label):
        self.ipxe_efi_path = ipxe_efi_path
        self.ipxe, ipxe_digest = _ipxe_and_digest(ipxe_efi_path)
        self.script = script
        self.label = label
        h = hashlib.sha256()
        for digest in (hashlib.sha256(LAYOUT_VERSION.encode()).digest(), ipxe_digest,
                       hashlib.sha256(script.encode()).digest(),
                       hashlib.sha256(label.encode()).digest()):
            h.update(digest)
        self.digest = h.hexdigest()[:16]

    @property
    def name(self):
        return f"ipxe-{self.digest}.iso"


def spec_for(services, partition, interface):
    opts = redfish_conf.get(services.conf)
    return IsoSpec(opts.ipxe_efi_path, render_script(services, partition, interface),
                   opts.iso_volume_label)


def cache_dir(conf):
    return os.path.join(conf.artifacts.cache_dir, CACHE_SUBDIR)


def cached_path(conf, name):
    """Path of a cached ISO named ``name`` if it exists (any configuration)."""
    if not ISO_NAME_RE.fullmatch(name or ""):
        return None
    path = os.path.join(cache_dir(conf), name)
    return path if os.path.isfile(path) else None


def ensure_iso(conf, spec):
    """Build the ISO of ``spec`` unless cached; return its path."""
    directory = cache_dir(conf)
    path = os.path.join(directory, spec.name)
    if os.path.isfile(path):
        return path
    with _build_locks_lock:
        lock = _build_locks.setdefault(spec.digest, threading.Lock())
    with lock:
        if os.path.isfile(path):
            return path
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".iso", dir=directory)
        os.close(fd)
        try:
            build_iso(spec.ipxe, spec.script, spec.label, tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)  # atomic: other processes see all or nothing
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


def _run(cmd):
    tool = cmd[0]
    if shutil.which(tool) is None:
        raise BootInterfaceError(
            f"building the iPXE ISO needs {tool} (Debian packages dosfstools and mtools)")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BootInterfaceError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                                 f"{proc.stderr.strip()}")


def build_efi_image(ipxe, script, path):
    """A FAT image holding /EFI/BOOT/BOOTX64.EFI and /autoexec.ipxe."""
    size_kib = max(2048, ((len(ipxe) + len(script)) // 1024 + 512 + 1023) // 1024 * 1024)
    with open(path, "wb") as f:
        f.truncate(size_kib * 1024)
    _run(["mkfs.vfat", "-n", "IPXEBOOT", path])
    work = os.path.dirname(path)
    efi = os.path.join(work, "BOOTX64.EFI")
    with open(efi, "wb") as f:
        f.write(ipxe)
    autoexec = os.path.join(work, "autoexec.ipxe")
    with open(autoexec, "w") as f:
        f.write(script)
    env_tools = ["-i", path]
    _run(["mmd", *env_tools, "::/EFI", "::/EFI/BOOT"])
    _run(["mcopy", *env_tools, efi, "::/EFI/BOOT/BOOTX64.EFI"])
    _run(["mcopy", *env_tools, autoexec, "::/autoexec.ipxe"])


def build_iso(ipxe, script, label, out_path):
    with tempfile.TemporaryDirectory(prefix="metalboot-iso-") as work:
        img_path = os.path.join(work, "efi.img")
        build_efi_image(ipxe, script, img_path)
        with open(img_path, "rb") as f:
            img = f.read()
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=label[:32])
    iso.add_fp(io.BytesIO(img), len(img), "/EFI.IMG;1", rr_name="efi.img",
               joliet_path="/efi.img")
    data = script.encode()
    iso.add_fp(io.BytesIO(data), len(data), "/AUTOEXEC.IPX;1", rr_name="autoexec.ipxe",
               joliet_path="/autoexec.ipxe")
    # One no-emulation entry for platform 0xEF (UEFI), as xorriso -e efi.img does.
    iso.add_eltorito("/EFI.IMG;1", bootcatfile="/BOOT.CAT;1", rr_bootcatname="boot.cat",
                     joliet_bootcatfile="/boot.cat", platform_id=0xEF, media_name="noemul")
    try:
        iso.write(out_path)
    finally:
        iso.close()
