"""A machine and its partition as a plugin sees them: frozen snapshots read
from the database (:class:`~metalboot_framework.task.MachineInfo`,
:class:`~metalboot_framework.task.PartitionInfo`).

A column read here must be in the revision triggers' list too
(store/schema/versions/0006), or the boot server will not see it change.
"""

import sqlalchemy

from metalboot_framework.exceptions import NotFound
from metalboot_framework.store import models
from metalboot_framework.task import BmcInfo, MachineInfo, NicInfo, PartitionInfo

_M, _N, _P = models.Machine.__table__, models.Nic.__table__, models.Partition.__table__
_IDS = sqlalchemy.bindparam("ids", expanding=True)
# What machine_info() reads, no more: each further column is a conversion per row
# (timestamps, the drift list), and a batch reads hundreds of machines.
_MACHINES_BY_IDS = sqlalchemy.select(*(_M.c[name] for name in (
    "id", "partition_id", "bmc_address", "bmc_username", "bmc_password", "bmc_verify_tls",
    "boot_interface", "boot_mode", "state", "properties", "token_generation",
    "prepared_interface"))).where(_M.c.id.in_(_IDS))
# Their partitions, each read once however many of its machines are in the batch.
_PARTITIONS_BY_IDS = sqlalchemy.select(_P).where(_P.c.id.in_(_IDS))
_NICS_BY_MACHINES = sqlalchemy.select(_N).where(_N.c.machine_id.in_(_IDS)) \
    .order_by(_N.c.machine_id, _N.c.position)


def snapshot(conn, machine_id, password_key):
    """(machine, partition) of ``machine_id`` (session or connection)."""
    found = snapshots(conn, [machine_id], password_key).get(machine_id)
    if found is None:
        raise NotFound(f"machine {machine_id} not found")
    return found


def snapshots(conn, machine_ids, password_key):
    """{machine id: (machine, partition)} for many machines in three queries
    (each machine gets a PartitionInfo of its own: plugins may not share one)."""
    found = {}
    partitions = {}  # id -> row
    for start in range(0, len(machine_ids), 500):
        ids = list(machine_ids[start:start + 500])
        nics = {}
        for nic in conn.execute(_NICS_BY_MACHINES, {"ids": ids}):
            nics.setdefault(nic.machine_id, []).append(nic)
        machines = conn.execute(_MACHINES_BY_IDS, {"ids": ids}).all()
        wanted = list({m.partition_id for m in machines} - partitions.keys())
        if wanted:
            partitions.update((p.id, p) for p in conn.execute(
                _PARTITIONS_BY_IDS, {"ids": wanted}))
        for machine in machines:
            partition = partitions.get(machine.partition_id)
            if partition is not None:
                found[machine.id] = (machine_info(machine, nics.get(machine.id, ()),
                                                  password_key),
                                     partition_info(partition))
    return found


def machine_info(machine, nics, password_key):
    """A machine row as plugins see it; ``password_key`` opens its BMC
    password when a plugin reads it."""
    return MachineInfo(
        id=machine.id, partition_id=machine.partition_id,
        bmc=BmcInfo.sealed(machine.bmc_address, machine.bmc_username, machine.bmc_password,
                           machine.bmc_verify_tls, password_key),
        nics=tuple(NicInfo(n.mac, n.duid, n.ipv4_address, n.ipv6_address) for n in nics),
        boot_interface=machine.boot_interface, boot_mode=machine.boot_mode,
        state=machine.state, properties=dict(machine.properties or {}),
        token_generation=machine.token_generation,
        prepared_interface=machine.prepared_interface)


def partition_info(p):
    """A partition row as plugins see it."""
    return PartitionInfo(id=p.id, kernel_url=p.kernel_url, initrd_url=p.initrd_url,
                         cmdline=p.cmdline or "", metal_boot_url=p.metal_boot_url,
                         metal_hammer_version=p.metal_hammer_version,
                         properties=dict(p.properties or {}), boot_url=p.boot_url)
