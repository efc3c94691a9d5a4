"""The objects the API, the conductor and the plugins share, built once per
process from the configuration: the container that wires them together.

Each job lives in a module of its own; :class:`Services` only builds them and
names them:

- :mod:`metalboot_framework.transactions`: write transactions, group commit,
  and the hooks and announcements that follow a commit;
- :mod:`metalboot_framework.boot_urls`: the URLs machines, BMCs and boot
  scripts are given;
- :mod:`metalboot_framework.boot_scripts`: rendering and amending boot.ipxe;
- :mod:`metalboot_framework.snapshots`: a machine and its partition as a
  plugin sees them.
"""

import threading

from metalboot_framework import hooks as hooks_mod
from metalboot_framework import loader
from metalboot_framework import snapshots as snapshots_mod
from metalboot_framework.address_binding import AddressBinding
from metalboot_framework.boot_scripts import BootScripts
from metalboot_framework.boot_urls import BootUrls
from metalboot_framework.steploop import StepLoop
from metalboot_framework.store import db as db_mod
from metalboot_framework.store import password_key as password_key_mod
from metalboot_framework.task import BootTask
from metalboot_framework.tokens import TokenSigner
from metalboot_framework.transactions import Transactions


def _of(component, name):
    """``services.<name>``, which is ``services.<component>.<name>``: the names
    plugins (``task.services``) and the core call them by."""
    return property(lambda self: getattr(getattr(self, component), name),
                    doc=f"``{component}.{name}``")


class BootServices:
    """What serving a booting machine takes: configuration, boot interfaces,
    hooks, the machine tokens (:attr:`tokens`: what
    :class:`~metalboot_framework.tokens.TokenSigner` answers), the address
    binding rule, URLs and scripts. No database: the partition's boot agent
    runs on this alone (:mod:`metalboot_framework.agent`)."""

    def __init__(self, conf, interfaces, hooks, tokens):
        self.conf = conf
        self.interfaces = interfaces
        self.hooks = hooks
        self.tokens = tokens
        # Whether a fetch by MAC came from an address its machine can have.
        self.address_binding = AddressBinding(conf)
        self.urls = BootUrls(conf)
        self.boot_scripts = BootScripts(conf, hooks, self.urls)

    @staticmethod
    def load_plugins(conf):
        """(boot interfaces, hooks) as the configuration enables them."""
        interfaces = loader.BootInterfaces(conf.enabled_boot_interfaces,
                                           conf.default_boot_interface)
        hooks = hooks_mod.Hooks(hooks_mod.make_plugin_manager(conf.disabled_hooks))
        return interfaces, hooks

    # -- URLs and scripts (metalboot_framework.boot_urls, .boot_scripts) -----
    public_url = _of("urls", "public_url")
    artifact_url = _of("urls", "artifact_url")
    partition_artifact_url = _of("urls", "partition_artifact_url")
    mac_boot_script_url = _of("urls", "mac_boot_script_url")
    report_url = _of("urls", "report_url")
    templates = _of("boot_scripts", "templates")
    render_boot_script = _of("boot_scripts", "render")


class Services(BootServices):
    """Configuration, database, boot interfaces, hooks and token signer, and
    the components built on them (:attr:`transactions`, :attr:`urls`,
    :attr:`boot_scripts`)."""

    def __init__(self, conf, db, interfaces, hooks, tokens, password_key):
        super().__init__(conf, interfaces, hooks, tokens)
        self.db = db
        # Seals BMC passwords before they are stored, opens them when read.
        self.password_key = password_key
        # Coroutine plugin steps and the conductor's machines (started when first used).
        self.step_loop = StepLoop()
        # Called when the API made work for a conductor (a migration created or
        # resumed, a machine to enrol or remove): a conductor in this process
        # looks at once, not at its next poll.
        self.work_watchers = []
        self.transactions = Transactions(db, hooks, self.step_loop)
        # Set when the process shuts down: requests that wait (the boot data
        # feed's long poll) answer at once instead of holding the shutdown.
        self.stopping = threading.Event()

    @classmethod
    def from_conf(cls, conf, upgrade=None):
        """Load plugins and hooks, open the database, upgrade its schema."""
        interfaces, hooks = cls.load_plugins(conf)
        db = db_mod.Database(conf.database.connection, pool_size=conf.database.pool_size)
        key = password_key_mod.load(conf.database.bmc_password_key_file, db)
        if conf.database.auto_upgrade if upgrade is None else upgrade:
            db.upgrade(password_key=key)
        password_key_mod.check(key, db)
        tokens = TokenSigner.from_database(db)
        return cls(conf, db, interfaces, hooks, tokens, key)

    def work_arrived(self):
        """Wake the conductors of this process: the API made work for them."""
        for watcher in self.work_watchers:
            watcher()

    # -- snapshots and tasks (metalboot_framework.snapshots) ------------------
    def snapshot(self, conn, machine_id):
        """The machine and its partition as a plugin sees them (session or connection)."""
        return snapshots_mod.snapshot(conn, machine_id, self.password_key)

    def snapshots(self, conn, machine_ids):
        """{machine id: (machine, partition)} for many machines in three queries."""
        return snapshots_mod.snapshots(conn, machine_ids, self.password_key)

    def task(self, machine_id, interface, migration_id=None):
        """A :class:`~metalboot_framework.task.BootTask` of the machine as it is now."""
        with self.db.read_conn() as conn:
            machine, partition = self.snapshot(conn, machine_id)
        return BootTask(self, machine, partition, interface, migration_id=migration_id)
