"""``fake``: records every call and boots only when a simulated machine says so.

Like Ironic's fake hardware type, it touches no BMC and no DHCP server. Each
call is appended to the machine's event history (kind ``<name>.<step>``, the
name it was loaded as: ``fake-alt.activate``) and to
:attr:`FakeBootInterface.calls` (the last :data:`CALLS_KEPT`, so that a demo
server running for weeks does not grow); the ``activate`` event carries the boot
URL a BMC would have been given (a simulated machine reads it from there, see
:mod:`metalboot_framework.testing.simulator`). It is installed twice, as
``fake`` and ``fake-alt``, so that migrations between two simulated paths can
be shown without hardware. Its steps are coroutines (a BMC client on asyncio
would be written so); ``fake-blocking`` and ``fake-blocking-alt`` are the same
interface with its steps written as blocking functions, as a plugin on a
synchronous BMC library (sushy) is: the conductor runs those in its worker
threads. Evidence comes from a simulated machine that
fetches the machine's boot.ipxe URL or posts a boot report, or, with the
machine property ``fake_autoboot``, from the plugin itself fetching that URL
over HTTP after activation, as a machine's firmware would.

Machine properties it reads:

- ``fake_fail``: mapping of step name to an error message; that step raises.
- ``fake_delay``: seconds every call waits (a slow BMC): ``asyncio.sleep`` in
  the coroutine steps, ``time.sleep`` in the blocking ones.
- ``fake_autoboot``: after ``activate``, fetch the boot.ipxe URL in a thread.
- ``fake_boot_delay``: seconds between activate and that fetch.
"""

import asyncio
import collections
import logging
import os
import threading
import time

import requests
from oslo_config import cfg

from metalboot_framework.boot_interface import BootInterface, Capability, Property
from metalboot_framework.exceptions import BootInterfaceError, ValidationFailed

LOG = logging.getLogger(__name__)

CALLS_KEPT = 10000  # calls remembered in FakeBootInterface.calls

opts = [
    cfg.BoolOpt("record_events", default=True,
                help="Append each fake call to the machine's event history."),
    cfg.FloatOpt("autoboot_timeout", default=10.0,
                 help="HTTP timeout of a simulated boot's fetch."),
    cfg.StrOpt("console_log",
               help="File to which activate appends '<machine id> <boot URL>' lines: the "
                    "console of a simulated BMC, for simulators in another process "
                    "(benchmarks) that boot machines without polling the API."),
]
cfg.CONF.register_opts(opts, group="fake")


def list_opts():
    return [("fake", opts)]


class FakeBootInterface(BootInterface):
    """Fake boot interface for tests and demos; touches no real machine."""

    capabilities = frozenset({Capability.SIMULATED, Capability.BIOS, Capability.IPV4,
                              Capability.IPV6})

    def __init__(self):
        # deque.append is atomic: no lock, which hundreds of workers would queue on
        self.calls = collections.deque(maxlen=CALLS_KEPT)
        self._consoles = {}  # console_log path -> descriptor, opened once
        self._console_lock = threading.Lock()

    def get_properties(self):
        return {
            "fake_fail": Property("Mapping step name -> error message; that step fails "
                                  "(a key '<interface>.<step>': only that interface's)."),
            "fake_delay": Property("Seconds each call sleeps, to simulate a slow BMC."),
            "fake_autoboot": Property("Simulate the machine: fetch boot.ipxe after "
                                      "activate."),
            "fake_boot_delay": Property("Seconds from activate to the simulated fetch."),
        }

    def _begin(self, step, task):
        """Record the call; the seconds it is to take."""
        self.calls.append((step, task.machine.id))
        return float(task.machine.properties.get("fake_delay") or 0)

    def _end(self, step, task):
        failures = task.machine.properties.get("fake_fail") or {}
        failure = failures.get(f"{self.name}.{step}") or failures.get(step)
        if failure:
            raise (ValidationFailed if step == "validate" else BootInterfaceError)(
                f"{self.name} {step} failed for machine {task.machine.id}: {failure}")

    async def _call(self, step, task, **data):
        delay = self._begin(step, task)
        if delay:
            await asyncio.sleep(delay)
        if task.conf.fake.record_events:
            await task.arecord_event(step, f"{self.name} {step} called", **data)
        self._end(step, task)

    @staticmethod
    def _check_fail_property(task):
        fail = task.machine.properties.get("fake_fail")
        if fail is not None and not isinstance(fail, dict):
            raise ValidationFailed("property fake_fail must be a mapping of step to message",
                                   fields={"properties.fake_fail": ["must be an object"]})

    async def validate(self, task):
        self._check_fail_property(task)
        await self._call("validate", task)

    async def prepare(self, task):
        await self._call("prepare", task)

    async def activate(self, task):
        # What a BMC would be told: the simulated machine reads it from the event.
        url = task.artifact_url("boot.ipxe")
        await self._call("activate", task, boot_url=url)
        self._reset(task, url)

    async def clean_up(self, task):
        await self._call("clean_up", task)

    def _reset(self, task, url):
        """What the simulated machine sees of its reset: the console line, and
        its own boot if it boots by itself."""
        if task.conf.fake.console_log:
            # One write(2) to a descriptor opened with O_APPEND: lines of many
            # machines never interleave, and no lock is held across the write
            os.write(self._console_fd(task.conf.fake.console_log),
                     f"{task.machine.id} {url}\n".encode())
        if task.machine.properties.get("fake_autoboot"):
            delay = float(task.machine.properties.get("fake_boot_delay") or 0)
            threading.Thread(target=self._boot, args=(url, delay, task.conf.fake.autoboot_timeout),
                             daemon=True, name=f"fake-boot-{task.machine.id}").start()

    def _console_fd(self, path):
        fd = self._consoles.get(path)
        if fd is None:
            with self._console_lock:
                if path not in self._consoles:
                    self._consoles[path] = os.open(
                        path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                fd = self._consoles[path]
        return fd

    @staticmethod
    def _boot(url, delay, timeout):
        time.sleep(delay)
        try:
            requests.get(url, timeout=timeout).raise_for_status()
        except requests.RequestException as exc:
            LOG.warning("simulated boot fetch of %s failed: %s", url, exc)

    def check_drift(self, task):
        drift = task.machine.properties.get("fake_drift")
        return [str(drift)] if drift else []


class BlockingFakeBootInterface(FakeBootInterface):
    """Fake boot interface with blocking steps, for tests and benchmarks of the
    conductor's worker threads; touches no real machine."""

    def _call(self, step, task, **data):
        delay = self._begin(step, task)
        if delay:
            time.sleep(delay)
        if task.conf.fake.record_events:
            task.record_event(step, f"{self.name} {step} called", **data)
        self._end(step, task)

    def validate(self, task):
        self._check_fail_property(task)
        self._call("validate", task)

    def prepare(self, task):
        self._call("prepare", task)

    def activate(self, task):
        url = task.artifact_url("boot.ipxe")
        self._call("activate", task, boot_url=url)
        self._reset(task, url)

    def clean_up(self, task):
        self._call("clean_up", task)
