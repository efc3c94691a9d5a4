"""Conformance kit: the boot-interface contract as tests every plugin runs.

:class:`BootInterfaceConformance` is a pytest test base class. A plugin's test
module subclasses it (the subclass name starts with ``Test`` so that pytest
collects it), names the interface and says how to observe the part of the
world the interface changes; pytest then runs every contract check below
against the real plugin, loaded through its entry point, in a real
:class:`~metalboot_framework.services.Services` with a SQLite database in a
temporary state directory::

    from metalboot_framework.testing.conformance import BootInterfaceConformance

    class TestMyInterfaceConformance(BootInterfaceConformance):
        interface_name = "my-interface"          # the entry-point name

        def conformance_options(self, tmp_path):  # [group] option = value
            return {"my_group": {"spool_dir": str(self.spool(tmp_path))}}

        def machine_fields(self, index):         # a machine that can use it
            fields = super().machine_fields(index)
            fields["properties"] = {"my_thing": "x"}
            return fields

        def snapshot_world(self):                 # what the plugin touches
            return {p.name: p.read_text() for p in self.spool_dir.iterdir()}

The kit needs no network by default: the database is SQLite in ``tmp_path``,
artifacts are fetched and boot reports posted through Flask's test client
(no socket), and the world is whatever :meth:`snapshot_world` reads. A plugin
whose world is a real server (a BMC emulator, a DHCP server) starts it in a
fixture of its own and marks the subclass ``@pytest.mark.functional``.

.. rubric:: What the subclass provides (hooks)

``interface_name`` (required)
    Entry-point name of the interface in ``metalboot.boot_interfaces``.
``other_interface`` (default ``"fake"``)
    Another installed interface, enabled next to it. Fetches under its URLs
    must not count as evidence for the interface under test.
:meth:`snapshot_world` (required)
    A comparable (``==``) description of the external state the interface
    changes: a BMC's boot settings and media, a DHCP server's files or
    reservations, a directory. Prefer a ``dict`` (differences are then
    reported key by key). It may read ``self.services``, ``self.task``,
    ``self.bystander_task`` and anything the subclass's fixtures stored on
    ``self``; it must not change the world.
:meth:`without_declared_residue` (optional)
    ``world`` minus what ``clean_up`` is allowed to leave behind, with the
    reason in the docstring (a reset machine stays powered on; dnsmasq keeps
    a tombstone file until it restarts). The default declares nothing.
:meth:`conformance_options` (optional)
    Option overrides for the default Services, as ``{group: {name: value}}``
    (``"DEFAULT"`` for the default group). It is called with ``tmp_path``
    before anything else, so it is also the place to create the directories
    the world lives in.
:meth:`machine_fields` (optional)
    Registration fields (as in ``POST /v1/machines``) of machine 0 (the one
    under test) and machine 1 (a bystander on the same interface). They
    must describe machines that pass :meth:`~BootInterface.validate`.
:meth:`invalid_machine_fields` (optional)
    Fields of a machine that must fail validation; ``None`` skips that check.
:meth:`make_machine` (optional)
    Registers one machine and returns its id; override when machine rows
    need more than registration fields (e.g. a system on a BMC emulator).
``conformance_services`` (fixture, optional)
    The Services the kit runs in; the default is :func:`make_services` with
    ``interface_name`` and ``other_interface`` enabled. Override the fixture
    to take other fixtures (an emulator, a DHCP server) as arguments.
:meth:`build_interface` (optional)
    The interface object; the default takes it from ``services.interfaces``
    (i.e. as the server loads it, through its entry point).

.. rubric:: What the kit checks

- **documented**: ``get_properties()`` maps names to :class:`Property` objects
  with a non-empty description; ``capabilities`` is a frozenset of
  :class:`Capability` members; an interface that needs a BMC documents
  ``bmc.address``, one that needs DHCP documents ``nics``; the class has a
  docstring; ``evidence_artifacts`` are plain names (or boot reports count).
- **describe()** is JSON-serialisable, survives a JSON round trip unchanged
  and names the interface.
- Steps are called through :meth:`BootInterfaceConformance.step`: written as
  coroutines (``async def``), they run on the process's step loop.
- **validate has no side effects**: the world is unchanged after ``validate``
  of a valid machine and after a ``validate`` that fails (for
  :meth:`invalid_machine_fields`), which must raise
  :class:`~metalboot_framework.exceptions.ValidationFailed`.
- **events name the interface**: events the steps record through
  ``task.record_event`` are ``<interface_name>.<what>`` and carry
  ``interface`` in their data.
- **idempotent**: ``prepare``, ``activate`` and ``clean_up`` called twice leave
  the same world as called once (the conductor repeats the step it was
  killed in).
- **clean_up leaves nothing**: after prepare + activate + clean_up, and after
  prepare alone + clean_up, the world equals the world before prepare (apart
  from :meth:`without_declared_residue`); clean_up of a machine on which
  nothing was prepared succeeds and changes nothing; clean_up of one
  machine leaves another machine's prepared state alone.
- **evidence**: after ``activate``, a fetch of each ``evidence_artifacts`` name
  under the machine's own URL is served and the record it leaves is what
  ``recognise_evidence`` returns; fetches under another interface's URLs,
  boot reports naming another interface, fetches of another machine's URLs
  and fetches with another machine's token are not evidence for this
  machine; a boot report naming the interface counts exactly when
  ``accepts_boot_report`` is set. Records are handed to
  ``recognise_evidence`` as the conductor does: the machine's own records
  since activation, oldest first.

Helpers for plugin tests that do not use the class: :func:`make_conf`,
:func:`make_services`, :func:`close_services`, :func:`add_machine`,
:func:`fetch`, :func:`evidence_since`.
"""

import importlib.metadata
import json
import secrets
import urllib.parse
import uuid
from typing import Any, Mapping, Optional

import pytest
from oslo_config import cfg
from sqlalchemy import func, select

from metalboot_framework.boot_interface import BootInterface, Capability, Evidence, Property
from metalboot_framework.exceptions import ValidationFailed
from metalboot_framework.steploop import call_blocking

#: Names of ``oslo.config.opts`` entry points whose options :func:`make_conf`
#: registers: ``metalboot`` and ``metalboot.<anything>`` (third-party plugins
#: should name theirs that way too).
OPTS_ENTRY_POINT_PREFIX = "metalboot"

#: The public URL the default Services build artifact URLs with. Nothing
#: listens there: the kit fetches through Flask's test client.
DEFAULT_PUBLIC_URL = "http://metalboot.conformance.invalid:6480"


# -- helpers -----------------------------------------------------------------------------
def _opts_entry_points():
    for ep in importlib.metadata.entry_points(group="oslo.config.opts"):
        if ep.name == OPTS_ENTRY_POINT_PREFIX or ep.name.startswith(
                OPTS_ENTRY_POINT_PREFIX + "."):
            yield ep


def _register(conf, group, opts):
    for opt in opts:
        try:
            conf.register_opt(opt, group=None if group in (None, "DEFAULT") else group)
        except cfg.DuplicateOptError:
            pass  # another list_opts() registered the same name differently: first wins


def make_conf(state_dir, enabled, default=None, options=None, public_url=DEFAULT_PUBLIC_URL):
    """A fresh ``cfg.ConfigOpts`` (not the global ``CONF``) for one test.

    Every option of the core and of every installed plugin that declares an
    ``oslo.config.opts`` entry point named ``metalboot[.*]`` is registered.
    ``state_path`` is ``state_dir`` (the SQLite database lives there),
    ``enabled_boot_interfaces`` is ``enabled``, the default interface is
    ``default`` (the first enabled one if not given), an admin token is set
    (so nothing is generated on disk) and ``options`` = ``{group: {name:
    value}}`` is applied last.
    """
    from metalboot_framework.conf import opts as core_opts

    conf = cfg.ConfigOpts()
    for group, opts in core_opts.list_opts():
        _register(conf, group, opts)
    for ep in _opts_entry_points():
        for group, opts in ep.load()():
            _register(conf, group, opts)
    conf([], project="metalboot", default_config_files=[], default_config_dirs=[])
    enabled = list(dict.fromkeys(enabled))
    conf.set_override("state_path", str(state_dir))
    conf.set_override("enabled_boot_interfaces", enabled)
    conf.set_override("default_boot_interface", default or enabled[0])
    conf.set_override("admin_tokens", [secrets.token_urlsafe(16)], group="api")
    conf.set_override("public_url", public_url, group="api")
    for group, values in (options or {}).items():
        for name, value in values.items():
            conf.set_override(name, value, group=None if group == "DEFAULT" else group)
    return conf


def make_services(state_dir, enabled, default=None, options=None,
                  public_url=DEFAULT_PUBLIC_URL, conf=None):
    """Real Services: plugins loaded by entry point, SQLite under ``state_dir``.

    The schema is created at once. Pass ``conf`` to use a configuration made
    elsewhere (the other arguments are then ignored). Dispose of it with
    :func:`close_services`.
    """
    from metalboot_framework.services import Services

    if conf is None:
        conf = make_conf(state_dir, enabled, default=default, options=options,
                         public_url=public_url)
    return Services.from_conf(conf, upgrade=True)


def close_services(services):
    """Close the database connections and the step loop of ``services``."""
    services.step_loop.close()
    services.db.dispose()


def add_machine(services, machine_id=None, partition="p1", **fields):
    """Register one machine (creating its partition if needed); return its id.

    ``fields`` are those of ``POST /v1/machines`` (``nics``, ``bmc``,
    ``boot_interface``, ``boot_mode``, ``properties``); MACs are normalised
    as the API does. Registration goes through the same inventory operation
    as the API, hooks included.
    """
    from metalboot_framework import inventory
    from metalboot_framework.dhcp import normalize_mac
    from metalboot_framework.store import models

    with services.db.read() as session:
        exists = session.get(models.Partition, partition) is not None
    if not exists:
        inventory.create_partition(services, {"id": partition, "boot": {
            "kernel_url": "http://images.invalid/metal-hammer/vmlinuz",
            "initrd_url": "http://images.invalid/metal-hammer/initrd.img",
            "cmdline": "console=ttyS0"}})
    item = {"id": machine_id or str(uuid.uuid4()), "partition": partition}
    item.update(fields)
    item["nics"] = [dict(nic, mac=normalize_mac(nic["mac"])) for nic in item.get("nics") or []]
    inventory.register_machines(services, [item], many=False)
    return item["id"]


def fetch(client, url, **kwargs):
    """GET ``url`` through a Flask test client (only its path and query are used)."""
    parts = urllib.parse.urlsplit(url)
    return client.get(parts.path + (f"?{parts.query}" if parts.query else ""), **kwargs)


def latest_evidence_id(services):
    from metalboot_framework.store import models

    with services.db.read() as session:
        return session.scalar(select(func.max(models.BootEvidence.id))) or 0


def evidence_since(services, machine_id, after_id=0):
    """The machine's evidence records with an id above ``after_id``, oldest first,
    as :class:`Evidence` objects -- what the conductor hands to
    ``recognise_evidence``."""
    from metalboot_framework.store import models

    with services.db.read() as session:
        rows = session.scalars(select(models.BootEvidence).where(
            models.BootEvidence.machine_id == machine_id,
            models.BootEvidence.id > after_id).order_by(models.BootEvidence.id)).all()
        return [Evidence(e.id, e.machine_id, e.interface, e.kind, e.path, e.client_address,
                         e.created_at) for e in rows]


def record_fetch(services, machine_id, interface, name, client_address="192.0.2.1"):
    """Store a fetch record as the artifact server would after serving ``name``.

    For fetches the server cannot make happen in a test: an artifact another
    interface does not serve.
    """
    from metalboot_framework.store import models

    with services.transactions.now() as unit:
        unit.session.add(models.BootEvidence(
            machine_id=machine_id, interface=interface, kind="fetch", path=name,
            client_address=client_address, created_at=models.utcnow()))


def world_difference(before, after):
    """A short, readable description of how two world snapshots differ."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        lines = []
        for key in sorted(set(before) | set(after), key=repr):
            if key not in after:
                lines.append(f"  removed {key!r}: {before[key]!r}")
            elif key not in before:
                lines.append(f"  added   {key!r}: {after[key]!r}")
            elif before[key] != after[key]:
                lines.append(f"  changed {key!r}: {before[key]!r} -> {after[key]!r}")
        return "\n".join(lines)
    return f"  before: {before!r}\n  after:  {after!r}"


def assert_same_world(before, after, what):
    assert after == before, f"{what} changed the world:\n{world_difference(before, after)}"


# -- the test base class ---------------------------------------------------------------------
class BootInterfaceConformance:
    """Contract checks for one boot interface; subclass it (see the module docstring)."""

    #: Entry-point name of the interface under test.
    interface_name: str = ""

    #: Another installed interface, enabled beside it, whose URLs must not count.
    other_interface: str = "fake"

    #: Set by the kit before each test.
    services: Any = None
    interface: Optional[BootInterface] = None
    task: Any = None
    bystander_task: Any = None
    client: Any = None

    # -- hooks the subclass fills in ------------------------------------------------------
    def snapshot_world(self):
        """A comparable description of the external state the interface changes."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement snapshot_world(): a comparable "
            f"description of what {self.interface_name or 'the interface'} changes outside "
            f"metalboot (BMC settings, DHCP files, ...)")

    def without_declared_residue(self, world):
        """``world`` without what clean_up may leave behind. Default: nothing."""
        return world

    def conformance_options(self, tmp_path) -> Mapping[str, Mapping[str, Any]]:
        """Option overrides for the default Services: ``{group: {name: value}}``."""
        return {}

    def machine_fields(self, index) -> dict:
        """Registration fields of machine ``index`` (0: under test, 1: bystander)."""
        return {"nics": [{"mac": f"52:54:00:c0:{index:02x}:01"}], "boot_mode": "uefi",
                "boot_interface": self.interface_name}

    def invalid_machine_fields(self) -> Optional[dict]:
        """Fields of a machine validate must refuse; ``None``: no such check."""
        return None

    def make_machine(self, services, index) -> str:
        """Register machine ``index`` and return its id."""
        return add_machine(services, **self.machine_fields(index))

    def build_interface(self, services) -> BootInterface:
        return services.interfaces.get(self.interface_name)

    @pytest.fixture
    def conformance_services(self, tmp_path):
        """The Services the checks run in (override to use other fixtures)."""
        services = make_services(tmp_path / "metalboot-state",
                                 [self.interface_name, self.other_interface],
                                 options=self.conformance_options(tmp_path))
        yield services
        close_services(services)

    # -- set-up -----------------------------------------------------------------------------
    @pytest.fixture(autouse=True)
    def _conformance_setup(self, conformance_services):
        from metalboot_framework.api import create_app

        assert self.interface_name, f"{type(self).__name__}.interface_name is not set"
        services = conformance_services
        assert self.interface_name in services.interfaces, (
            f"{self.interface_name} is not enabled in the conformance Services")
        assert self.other_interface in services.interfaces, (
            f"other_interface {self.other_interface} is not enabled in the conformance "
            f"Services")
        self.services = services
        self.interface = self.build_interface(services)
        self.task = services.task(self.make_machine(services, 0), self.interface_name)
        self.bystander_task = services.task(self.make_machine(services, 1), self.interface_name)
        self.client = create_app(services).test_client()
        yield

    def step(self, name, task):
        """Call step ``name`` of the interface as the conductor would, whether the
        plugin wrote it as a blocking function or as a coroutine."""
        return call_blocking(getattr(self.interface, name), task)

    def world(self):
        return self.snapshot_world()

    def residue_free(self, world):
        return self.without_declared_residue(world)

    # -- documented ---------------------------------------------------------------------------
    def test_properties_documented(self):
        props = self.interface.get_properties()
        assert isinstance(props, Mapping), "get_properties() must return a mapping"
        for key, prop in props.items():
            assert isinstance(key, str) and key, f"property name {key!r} is not a string"
            assert isinstance(prop, Property), (
                f"property {key}: {prop!r} is not a boot_interface.Property")
            assert isinstance(prop.description, str) and prop.description.strip(), (
                f"property {key} has no description")
            assert isinstance(prop.required, bool), f"property {key}: required is not a bool"

    def test_capabilities_declared(self):
        caps = type(self.interface).capabilities
        assert isinstance(caps, frozenset), "capabilities must be a frozenset"
        for cap in caps:
            assert isinstance(cap, Capability), f"capability {cap!r} is not a Capability"
        props = self.interface.get_properties()
        if Capability.NEEDS_BMC in caps:
            assert "bmc.address" in props, "needs_bmc, but bmc.address is not documented"
        if Capability.NEEDS_DHCP in caps:
            assert "nics" in props, "needs_dhcp, but nics is not documented"

    def test_class_and_evidence_declared(self):
        assert (type(self.interface).__doc__ or "").strip(), (
            "the interface class needs a docstring (describe() shows its first paragraph)")
        names = self.interface.evidence_artifacts
        assert not isinstance(names, str), "evidence_artifacts must be a sequence of names"
        for name in names:
            assert isinstance(name, str) and name and "/" not in name, (
                f"evidence artifact {name!r} is not a plain artifact name")
        assert names or self.interface.accepts_boot_report, (
            "nothing could ever prove a boot: no evidence_artifacts and no boot reports")

    def test_describe_is_json(self):
        described = self.interface.describe()
        text = json.dumps(described)
        assert json.loads(text) == described, "describe() does not survive a JSON round trip"
        assert described["name"] == self.interface_name
        assert described["description"], "describe() has no description"
        props = self.interface.get_properties()
        assert set(described["properties"]) == set(props)

    # -- validate -----------------------------------------------------------------------------
    def test_validate_has_no_side_effects(self):
        before = self.world()
        self.step("validate", self.task)
        self.step("validate", self.task)
        assert_same_world(before, self.world(), "validate")

    def test_failing_validate_has_no_side_effects(self):
        fields = self.invalid_machine_fields()
        if fields is None:
            pytest.skip("no invalid_machine_fields() given")
        task = self.services.task(add_machine(self.services, **fields), self.interface_name)
        before = self.world()
        with pytest.raises(ValidationFailed):
            self.step("validate", task)
        assert_same_world(before, self.world(), "a failing validate")

    # -- events ----------------------------------------------------------------------------------
    def test_events_name_the_interface(self):
        """Events the steps record are ``<interface_name>.<what>`` with ``interface``
        in their data: the name the interface was loaded as, not the class's."""
        from metalboot_framework.store import models

        with self.services.db.read() as s:
            before = s.scalar(select(func.max(models.Event.id))) or 0
        for name in ("validate", "prepare", "activate", "clean_up"):
            self.step(name, self.task)
        with self.services.db.read() as s:
            recorded = s.execute(select(models.Event.kind, models.Event.data).where(
                models.Event.id > before)).all()
        for kind, data in recorded:
            assert kind.startswith(f"{self.interface_name}."), (
                f"event {kind} does not name the interface {self.interface_name}")
            assert (data or {}).get("interface") == self.interface_name, (kind, data)

    # -- idempotence ---------------------------------------------------------------------------
    def test_prepare_is_idempotent(self):
        self.step("prepare", self.task)
        once = self.world()
        self.step("prepare", self.task)
        assert_same_world(once, self.world(), "a second prepare")

    def test_activate_is_idempotent(self):
        self.step("prepare", self.task)
        self.step("activate", self.task)
        once = self.world()
        self.step("activate", self.task)
        assert_same_world(once, self.world(), "a second activate")

    def test_clean_up_is_idempotent(self):
        self.step("prepare", self.task)
        self.step("activate", self.task)
        self.step("clean_up", self.task)
        once = self.world()
        self.step("clean_up", self.task)
        assert_same_world(once, self.world(), "a second clean_up")

    # -- clean_up -------------------------------------------------------------------------------
    def test_clean_up_leaves_nothing_behind(self):
        before = self.residue_free(self.world())
        self.step("prepare", self.task)
        self.step("activate", self.task)
        self.step("clean_up", self.task)
        assert_same_world(before, self.residue_free(self.world()),
                          "prepare + activate + clean_up")

    def test_clean_up_after_prepare_only(self):
        before = self.residue_free(self.world())
        self.step("prepare", self.task)
        self.step("clean_up", self.task)
        assert_same_world(before, self.residue_free(self.world()), "prepare + clean_up")

    def test_clean_up_when_nothing_was_prepared(self):
        before = self.world()
        self.step("clean_up", self.task)
        assert_same_world(self.residue_free(before), self.residue_free(self.world()),
                          "clean_up of a machine on which nothing was prepared")

    def test_clean_up_spares_other_machines(self):
        self.step("prepare", self.bystander_task)
        self.step("activate", self.bystander_task)
        before = self.residue_free(self.world())
        self.step("prepare", self.task)
        self.step("activate", self.task)
        self.step("clean_up", self.task)
        assert_same_world(before, self.residue_free(self.world()),
                          "clean_up of one machine (while another is prepared)")

    # -- evidence ---------------------------------------------------------------------------------
    def _activated(self):
        self.step("prepare", self.task)
        self.step("activate", self.task)
        return latest_evidence_id(self.services)

    def test_evidence_artifacts_recognised(self):
        machine = self.task.machine.id
        self._activated()
        for name in self.interface.evidence_artifacts:
            cursor = latest_evidence_id(self.services)
            url = self.task.artifact_url(name)
            response = fetch(self.client, url)
            assert response.status_code == 200, (
                f"evidence artifact {name} is not served for machine {machine} "
                f"({url}: {response.status_code}); no fetch of it could ever be recorded")
            records = evidence_since(self.services, machine, cursor)
            assert [(r.kind, r.path, r.interface) for r in records] == [
                ("fetch", name, self.interface_name)], records
            found = self.interface.recognise_evidence(self.task, records)
            assert found == records[-1], (
                f"a fetch of {name} under the machine's own URL was not recognised")

    def test_other_interface_is_not_evidence(self):
        machine = self.task.machine.id
        cursor = self._activated()
        for name in self.interface.evidence_artifacts:
            url = self.task.artifact_url(name, interface=self.other_interface)
            if fetch(self.client, url).status_code != 200:
                # the other interface does not serve it: record what it would leave
                record_fetch(self.services, machine, self.other_interface, name)
        report = self.client.post(
            f"/v1/machines/{machine}/boot-report",
            json={"boot_interface": self.other_interface, "message": "conformance"},
            headers={"Authorization": f"Bearer {self.task.token_for(self.other_interface)}"})
        assert report.status_code == 201, report.get_json()
        records = evidence_since(self.services, machine, cursor)
        assert records and {r.interface for r in records} == {self.other_interface}
        assert self.interface.recognise_evidence(self.task, records) is None, (
            f"evidence for {self.other_interface} was taken as evidence for "
            f"{self.interface_name}")

    def test_other_machine_is_not_evidence(self):
        machine = self.task.machine.id
        cursor = self._activated()
        other = self.bystander_task
        for name in self.interface.evidence_artifacts:
            fetch(self.client, other.artifact_url(name))
            # this machine's URL with the other machine's token: refused
            parts = self.task.artifact_url(name).rsplit("/", 2)
            response = fetch(self.client, f"{parts[0]}/{other.token}/{parts[2]}")
            assert response.status_code == 404, (
                f"{name} of machine {machine} was served with another machine's token")
        assert evidence_since(self.services, machine, cursor) == [], (
            "fetches of another machine's URLs were recorded as this machine's evidence")
        others = evidence_since(self.services, other.machine.id, cursor)
        assert all(r.machine_id == other.machine.id for r in others)
        assert self.interface.recognise_evidence(self.task, []) is None

    def test_boot_report(self):
        machine = self.task.machine.id
        cursor = self._activated()
        report = self.client.post(
            f"/v1/machines/{machine}/boot-report",
            json={"boot_interface": self.interface_name, "message": "conformance"},
            headers={"Authorization": f"Bearer {self.task.token}"})
        assert report.status_code == 201, report.get_json()
        records = evidence_since(self.services, machine, cursor)
        found = self.interface.recognise_evidence(self.task, records)
        if self.interface.accepts_boot_report:
            assert found == records[-1], "a boot report naming the interface was not taken"
        else:
            assert found is None, "accepts_boot_report is off, but a boot report was taken"
