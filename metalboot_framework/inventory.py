"""Partitions and machines: registration, changes and their history.

Every change is one write transaction that also appends the events it causes;
hooks hear of it only after the commit. A machine whose lock is held by a
conductor, or that is in an active migration, refuses conflicting changes
with 409 instead of waiting.
"""

import types

from sqlalchemy import delete, func, insert, select

from metalboot_framework import machine_lifecycle, machine_steps
from metalboot_framework.machine_lifecycle import State
from metalboot_framework.conductor import machine_lock
from metalboot_framework.feed import event_dict
from metalboot_framework.exceptions import Conflict, InvalidInput, MachineLocked, NotFound
from metalboot_framework.store import models
from metalboot_framework.timestamps import iso

# What a migration relies on staying put while it runs.
MIGRATION_FROZEN_FIELDS = frozenset({"boot_interface", "partition", "nics", "boot_mode", "bmc"})


# -- partitions ---------------------------------------------------------------

BOOT_FIELDS = ("kernel_url", "initrd_url", "cmdline", "metal_boot_url", "metal_hammer_version",
               "boot_url")


def partition_dict(p, machine_count=None):
    out = {"id": p.id, "description": p.description or "",
           "boot": {f: getattr(p, f) for f in BOOT_FIELDS},
           "properties": p.properties or {}, "created_at": iso(p.created_at),
           "updated_at": iso(p.updated_at)}
    out["boot"]["cmdline"] = out["boot"]["cmdline"] or ""
    if machine_count is not None:
        out["machine_count"] = machine_count
    return out


def list_partitions(services):
    with services.db.read() as s:
        counts = dict(s.execute(select(models.Machine.partition_id, func.count())
                                .group_by(models.Machine.partition_id)).all())
        return [partition_dict(p, counts.get(p.id, 0))
                for p in s.scalars(select(models.Partition).order_by(models.Partition.id))]


def get_partition(services, partition_id):
    with services.db.read() as s:
        p = s.get(models.Partition, partition_id)
        if p is None:
            raise NotFound(f"partition {partition_id} not found")
        count = s.scalar(select(func.count()).select_from(models.Machine)
                         .where(models.Machine.partition_id == partition_id))
        return partition_dict(p, count)


def create_partition(services, data):
    with services.transactions.now() as unit:
        if unit.session.get(models.Partition, data["id"]) is not None:
            raise Conflict(f"partition {data['id']} exists already",
                           fields={"id": ["exists already"]})
        p = models.Partition(id=data["id"], description=data.get("description", ""),
                             properties=data.get("properties") or {},
                             created_at=models.utcnow(), cmdline="")
        for key, value in (data.get("boot") or {}).items():
            setattr(p, key, value if value is not None or key != "cmdline" else "")
        unit.session.add(p)
        unit.event("partition.created", f"partition {p.id} created",
                   data={"partition": p.id})
    return get_partition(services, data["id"])


def update_partition(services, partition_id, data):
    with services.transactions.now() as unit:
        p = unit.session.get(models.Partition, partition_id)
        if p is None:
            raise NotFound(f"partition {partition_id} not found")
        if "description" in data:
            p.description = data["description"]
        if "properties" in data:
            p.properties = data["properties"]
        for key, value in (data.get("boot") or {}).items():
            setattr(p, key, value if value is not None or key != "cmdline" else "")
        p.updated_at = models.utcnow()
        unit.event("partition.updated", f"partition {p.id} updated",
                   data={"partition": p.id, "changed": sorted(data)})
    return get_partition(services, partition_id)


def delete_partition(services, partition_id):
    with services.transactions.now() as unit:
        p = unit.session.get(models.Partition, partition_id)
        if p is None:
            raise NotFound(f"partition {partition_id} not found")
        count = unit.session.scalar(select(func.count()).select_from(models.Machine)
                                    .where(models.Machine.partition_id == partition_id))
        if count:
            raise Conflict(f"partition {partition_id} still has {count} machine(s)")
        unit.session.delete(p)
        unit.event("partition.deleted", f"partition {partition_id} deleted",
                   data={"partition": partition_id})


# -- machines -----------------------------------------------------------------

def nic_dict(n):
    return {"mac": n.mac, "duid": n.duid, "ipv4_address": n.ipv4_address,
            "ipv6_address": n.ipv6_address}


def _lock_view(held):
    return None if held is None else {"holder": held[0], "since": iso(held[1])}


def machine_dict(m, nics, migration=None):
    """A machine as the API shows it: never with its BMC password."""
    return {
        "id": m.id, "partition": m.partition_id,
        "bmc": None if m.bmc_address is None else {
            "address": m.bmc_address, "username": m.bmc_username,
            "verify_tls": bool(m.bmc_verify_tls), "password_set": bool(m.bmc_password)},
        "nics": [nic_dict(n) for n in nics],
        "boot_interface": m.boot_interface, "boot_mode": m.boot_mode, "state": m.state,
        "prepared_interface": m.prepared_interface, "last_error": m.last_error,
        "properties": m.properties or {},
        "lock": _lock_view(machine_lock.holder(m)),
        "migration": migration,
        "drift": m.drift, "drift_checked_at": iso(m.drift_checked_at),
        "created_at": iso(m.created_at), "updated_at": iso(m.updated_at),
    }


# Lists read plain rows (attribute access like ORM objects, a fraction of the cost).
MACHINES = models.Machine.__table__
NICS = models.Nic.__table__


def _nics_by_machine(session, machine_ids):
    result = {mid: [] for mid in machine_ids}
    ids = list(machine_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for nic in session.execute(select(NICS).where(NICS.c.machine_id.in_(chunk))
                                   .order_by(NICS.c.machine_id, NICS.c.position)):
            result[nic.machine_id].append(nic)
    return result


def _migrations_by_machine(session, machine_ids):
    """The active migration step of each machine, for the machine view."""
    result = {}
    ids = list(machine_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        mm_table = models.MigrationMachine.__table__
        rows = session.execute(
            select(mm_table, models.Migration.target_boot_interface)
            .join(models.Migration, models.Migration.id == mm_table.c.migration_id)
            .where(mm_table.c.machine_id.in_(chunk),
                   mm_table.c.state.in_(machine_steps.ACTIVE)))
        for mm in rows:
            target = mm.target_boot_interface
            result[mm.machine_id] = {"id": mm.migration_id, "step": mm.state,
                                     "target_boot_interface": target,
                                     "last_error": mm.last_error}
    return result


def machine_views(session, machines):
    ids = [m.id for m in machines]
    nics = _nics_by_machine(session, ids)
    migrations = _migrations_by_machine(session, ids)
    return [machine_dict(m, nics[m.id], migrations.get(m.id)) for m in machines]


def get_machine(services, machine_id):
    with services.db.read() as s:
        m = s.get(models.Machine, machine_id)
        if m is None:
            raise NotFound(f"machine {machine_id} not found")
        return machine_views(s, [m])[0]


def list_machines(services, partition=None, boot_interface=None, state=None, limit=100,
                  marker=None):
    with services.db.read() as s:
        q = select(MACHINES).order_by(MACHINES.c.id).limit(limit + 1)
        if partition:
            q = q.where(MACHINES.c.partition_id == partition)
        if boot_interface:
            q = q.where(MACHINES.c.boot_interface == boot_interface)
        if state:
            q = q.where(MACHINES.c.state == state)
        if marker:
            q = q.where(MACHINES.c.id > marker)
        machines = list(s.execute(q))
        more = len(machines) > limit
        machines = machines[:limit]
        return machine_views(s, machines), (machines[-1].id if more else None)


def _check_references(session, services, items, field_prefix):
    """Partitions and boot interfaces named by ``items`` must exist."""
    errors = {}
    partitions = {item["partition"] for item in items if "partition" in item}
    known = set(session.scalars(select(models.Partition.id).where(
        models.Partition.id.in_(partitions)))) if partitions else set()
    for index, item in enumerate(items):
        prefix = field_prefix(index)
        if "partition" in item and item["partition"] not in known:
            errors[f"{prefix}partition"] = [f"partition {item['partition']} does not exist"]
        iface = item.get("boot_interface")
        if iface is not None and iface not in services.interfaces:
            errors[f"{prefix}boot_interface"] = [
                f"{iface} is not an enabled boot interface "
                f"(enabled: {', '.join(services.interfaces.names())})"]
    if errors:
        first = next(iter(errors.items()))
        raise InvalidInput(f"{first[0]}: {first[1][0]}", fields=errors)


def _check_nic_conflicts(session, items, field_prefix, exclude_machine=None):
    macs, duids = {}, {}
    for index, item in enumerate(items):
        for pos, nic in enumerate(item.get("nics") or []):
            where = f"{field_prefix(index)}nics.{pos}"
            if nic["mac"] in macs:
                raise InvalidInput(f"MAC {nic['mac']} is given twice in the request",
                                   fields={f"{where}.mac": ["given twice in the request"]})
            macs[nic["mac"]] = where
            if nic.get("duid"):
                if nic["duid"] in duids:
                    raise InvalidInput(f"DUID {nic['duid']} is given twice in the request",
                                       fields={f"{where}.duid": ["given twice in the request"]})
                duids[nic["duid"]] = where
    conflicts = {}
    mac_list = list(macs)
    for start in range(0, len(mac_list), 500):
        q = select(models.Nic.mac, models.Nic.machine_id).where(
            models.Nic.mac.in_(mac_list[start:start + 500]))
        for mac, owner in session.execute(q):
            if owner != exclude_machine:
                conflicts[f"{macs[mac]}.mac"] = [f"MAC {mac} belongs to machine {owner}"]
    duid_list = list(duids)
    for start in range(0, len(duid_list), 500):
        q = select(models.Nic.duid, models.Nic.machine_id).where(
            models.Nic.duid.in_(duid_list[start:start + 500]))
        for duid, owner in session.execute(q):
            if owner != exclude_machine:
                conflicts[f"{duids[duid]}.duid"] = [f"DUID {duid} belongs to machine {owner}"]
    if conflicts:
        first = next(iter(conflicts.items()))
        raise Conflict(f"{first[0]}: {first[1][0]}", fields=conflicts)


def register_machines(services, items, many):
    """Register one machine or a list of them, all or nothing."""
    prefix = (lambda i: f"{i}.") if many else (lambda i: "")
    ids = [item["id"] for item in items]
    if len(set(ids)) != len(ids):
        seen, dup = set(), None
        for index, mid in enumerate(ids):
            if mid in seen:
                dup = (index, mid)
                break
            seen.add(mid)
        raise InvalidInput(f"machine {dup[1]} is given twice in the request",
                           fields={f"{prefix(dup[0])}id": ["given twice in the request"]})
    now = models.utcnow()
    default = services.interfaces.default
    machine_rows, nic_rows, event_rows = [], [], []
    for item in items:
        bmc = item.get("bmc") or {}
        iface = item.get("boot_interface") or default
        machine_rows.append({
            "id": item["id"], "partition_id": item["partition"],
            "bmc_address": bmc.get("address"), "bmc_username": bmc.get("username"),
            "bmc_password": bmc.get("password"), "bmc_verify_tls": bmc.get("verify_tls", True),
            "boot_interface": iface, "boot_mode": item.get("boot_mode", "uefi"),
            "state": State.ENROLLING.value, "prepared_interface": None, "last_error": None,
            "properties": item.get("properties") or {},
            "token_generation": 1, "created_at": now})
        for pos, nic in enumerate(item.get("nics") or []):
            nic_rows.append({"mac": nic["mac"], "machine_id": item["id"], "position": pos,
                             "duid": nic.get("duid"), "ipv4_address": nic.get("ipv4_address"),
                             "ipv6_address": nic.get("ipv6_address")})
        event_rows.append({"machine_id": item["id"], "kind": "machine.registered",
                           "message": f"registered in partition {item['partition']} on "
                                      f"boot interface {iface}",
                           "data": {"boot_interface": iface, "partition": item["partition"]},
                           "created_at": now})
    with services.transactions.now() as unit:
        unit.announce(services.work_arrived)  # enrolment, removal
        s = unit.session
        _check_references(s, services, items, prefix)
        existing = []
        for start in range(0, len(ids), 500):
            existing += s.scalars(select(models.Machine.id).where(
                models.Machine.id.in_(ids[start:start + 500]))).all()
        if existing:
            index = {mid: i for i, mid in enumerate(ids)}
            raise Conflict(f"machine {existing[0]} is registered already"
                           + (f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""),
                           fields={f"{prefix(index[mid])}id": ["registered already"]
                                   for mid in existing[:100]})
        _check_nic_conflicts(s, items, prefix)
        # sealed in the write transaction: a key rotation finishes with a write
        # transaction of its own, after which no row may hold a retired key
        passwords = services.password_key.seal_many([row["bmc_password"] for row in machine_rows])
        sealed = [{**row, "bmc_password": password}
                  for row, password in zip(machine_rows, passwords, strict=True)]
        s.execute(insert(models.Machine), sealed)
        if nic_rows:
            s.execute(insert(models.Nic), nic_rows)
        s.execute(insert(models.Event), event_rows)
    result = _views_of_new_rows(machine_rows, nic_rows)
    if services.hooks.has("metalboot_machine_registered"):
        for view in result:
            services.hooks.notify("metalboot_machine_registered", machine=view)
    if services.hooks.has("metalboot_event"):
        _notify_events(services, ids, "machine.registered")
    return result


def _notify_events(services, machine_ids, kind):
    with services.db.read() as s:
        for start in range(0, len(machine_ids), 500):
            for ev in s.scalars(select(models.Event).where(
                    models.Event.machine_id.in_(machine_ids[start:start + 500]),
                    models.Event.kind == kind).order_by(models.Event.id)):
                services.hooks.notify("metalboot_event", event=event_dict(ev))


def _views_of_new_rows(machine_rows, nic_rows):
    """The API view of machines just inserted, built from the inserted rows.

    Saves reading back (and holding as ORM objects) what was just written; a
    bulk registration of 10,000 machines would otherwise double its memory.
    """
    nics = {}
    for row in nic_rows:
        nics.setdefault(row["machine_id"], []).append(types.SimpleNamespace(**row))
    fresh = {**machine_lock.NEVER_HELD, "drift": None, "drift_checked_at": None,
             "updated_at": None}
    return [machine_dict(types.SimpleNamespace(**row, **fresh), nics.get(row["id"], []))
            for row in machine_rows]


def _machine_for_update(session, machine_id):
    m = session.scalars(select(models.Machine).where(models.Machine.id == machine_id)
                        .with_for_update()).first()
    if m is None:
        raise NotFound(f"machine {machine_id} not found")
    return m


def _refuse_if_locked(m):
    """Checked after the lasting reasons to refuse (a migration, a deletion): the
    lock of a conductor's step is over in a moment, and naming it would hide them."""
    held = machine_lock.holder(m)
    if held is not None:
        raise MachineLocked(f"machine {m.id} is locked by {held[0]} since "
                            f"{iso(held[1])}; try again when it is released")


def active_migration_of(session, machine_id):
    return session.scalars(select(models.MigrationMachine).where(
        models.MigrationMachine.machine_id == machine_id,
        models.MigrationMachine.state.in_(machine_steps.ACTIVE))).first()


def patch_machine(services, machine_id, data):
    changes = sorted(data)
    with services.transactions.now() as unit:
        unit.announce(services.work_arrived)  # enrolment, removal
        s = unit.session
        m = _machine_for_update(s, machine_id)
        if m.state == State.DELETING:
            raise Conflict(f"machine {machine_id} is being deleted; DELETE it with "
                           "force=true to forget it without clean-up")
        busy = active_migration_of(s, machine_id)
        frozen = sorted(MIGRATION_FROZEN_FIELDS & set(data))
        if busy is not None and frozen:
            raise Conflict(f"machine {machine_id} is in migration {busy.migration_id} "
                           f"(step {busy.state}); cancel it or wait before changing "
                           f"{', '.join(frozen)}",
                           fields={k: ["machine is in a migration"] for k in frozen})
        _refuse_if_locked(m)
        _check_references(s, services, [data], lambda i: "")
        if "nics" in data:
            _check_nic_conflicts(s, [data], lambda i: "", exclude_machine=machine_id)
        old_interface = m.boot_interface
        if "partition" in data:
            m.partition_id = data["partition"]
        if "bmc" in data:
            bmc = data["bmc"]
            if bmc is None:
                m.bmc_address = m.bmc_username = m.bmc_password = None
                m.bmc_verify_tls = True
            else:
                if m.bmc_address is None and "address" not in bmc:
                    raise InvalidInput("bmc.address is required for a machine without a BMC",
                                       fields={"bmc.address": ["Missing data for required field."]})
                for key, value in bmc.items():
                    if key == "password":  # sealed in the transaction, as at registration
                        value = services.password_key.seal(value)
                    setattr(m, f"bmc_{key}", value)
        for key in ("boot_interface", "boot_mode", "properties"):
            if key in data:
                setattr(m, key, data[key])
        if "state" in data:
            if m.state == State.MIGRATING:
                raise Conflict(f"machine {machine_id} is migrating; its state follows the "
                               f"migration", fields={"state": ["machine is migrating"]})
            m.state = data["state"]
            if m.state in machine_lifecycle.CLEARS_ERROR:
                m.last_error = None
        if m.state == State.READY and (m.boot_interface != m.prepared_interface
                                   or MIGRATION_FROZEN_FIELDS & set(data) - {"boot_interface"}):
            # Not prepared for its (new) boot interface, or what it was prepared
            # from changed (NICs, BMC, partition, boot mode): the conductor enrols it.
            m.state = State.ENROLLING.value
        if "nics" in data:
            s.execute(delete(models.Nic).where(models.Nic.machine_id == machine_id))
            s.flush()
            for pos, nic in enumerate(data["nics"]):
                s.add(models.Nic(machine_id=machine_id, position=pos, mac=nic["mac"],
                                 duid=nic.get("duid"), ipv4_address=nic.get("ipv4_address"),
                                 ipv6_address=nic.get("ipv6_address")))
        m.updated_at = models.utcnow()
        unit.event("machine.updated", f"changed {', '.join(changes)}", machine_id=machine_id,
                   data={"changed": changes})
        interface_changed = "boot_interface" in data and data["boot_interface"] != old_interface
        if interface_changed:
            unit.event("machine.boot_interface_changed",
                       f"boot interface {old_interface} -> {data['boot_interface']} (set "
                       f"through the API)", machine_id=machine_id,
                       data={"old": old_interface, "new": data["boot_interface"],
                             "reason": "api"})
    view = get_machine(services, machine_id)
    services.hooks.notify("metalboot_machine_updated", machine=view, changes=changes)
    if interface_changed:
        services.hooks.notify("metalboot_boot_interface_changed", machine=view,
                              old=old_interface, new=data["boot_interface"],
                              reason="set through the API")
    return view


def delete_machine(services, machine_id, force=False):
    """Forget a machine now if it was never prepared for a boot interface (or with
    ``force``); else hand it to the conductor, which cleans up what its interface
    prepared (DHCP entries, boot overrides) and then forgets it: returns the
    machine as committed, ``deleting`` (the conductor, woken by the commit, may
    have forgotten it before the answer), or None when it is gone already."""
    view = get_machine(services, machine_id)
    with services.transactions.now() as unit:
        unit.announce(services.work_arrived)  # enrolment, removal
        s = unit.session
        m = _machine_for_update(s, machine_id)
        busy = active_migration_of(s, machine_id)
        if busy is not None:
            raise Conflict(f"machine {machine_id} is in migration {busy.migration_id} "
                           f"(step {busy.state}); cancel it first")
        _refuse_if_locked(m)
        if m.prepared_interface is not None and not force:
            if m.state != State.DELETING:
                m.state, m.last_error, m.updated_at = State.DELETING.value, None, models.utcnow()
                unit.event("machine.deleting", f"deleting: {m.prepared_interface} is "
                           "cleaned up first", machine_id=machine_id,
                           data={"prepared_interface": m.prepared_interface})
            deleting = machine_views(s, [m])[0]
        else:
            forget_machine(unit, machine_id, cleaned_up=None if force else False)
            deleting = None
    if deleting:
        return deleting
    services.hooks.notify("metalboot_machine_deleted", machine=view)
    return None


def forget_machine(unit, machine_id, cleaned_up):
    """Delete the machine's rows (its events and evidence stay), with the event.
    ``cleaned_up``: the interface cleaned up first, False if none was prepared,
    None if the clean-up was skipped (``force``)."""
    s = unit.session
    s.execute(delete(models.Nic).where(models.Nic.machine_id == machine_id))
    s.execute(delete(models.Machine).where(models.Machine.id == machine_id))
    note = {None: " without clean-up (forced)", False: ""}.get(
        cleaned_up, f" ({cleaned_up} cleaned up)")
    unit.event("machine.deleted", "machine deleted" + note, machine_id=machine_id,
               data={"cleaned_up": cleaned_up or None, "forced": cleaned_up is None})


def evidence_dict(ev):
    data = ev.data or {}
    return {"id": ev.id, "interface": ev.interface, "kind": ev.kind, "path": ev.path,
            "client_address": ev.client_address, "created_at": iso(ev.created_at),
            "binding": data.get("by_mac"), "lease": data.get("lease")}


def _machine_history(services, machine_id, model, since, limit):
    """Rows of ``model`` (events, evidence) of a machine after id ``since``, oldest first."""
    with services.db.read() as s:
        if s.get(models.Machine, machine_id) is None:
            raise NotFound(f"machine {machine_id} not found")
        return list(s.scalars(select(model).where(
            model.machine_id == machine_id, model.id > since).order_by(model.id).limit(limit)))


def machine_evidence(services, machine_id, since=0, limit=100):
    """The machine's recorded fetches and boot reports, oldest first, after id ``since``."""
    rows = _machine_history(services, machine_id, models.BootEvidence, since, limit)
    return [evidence_dict(ev) for ev in rows], (rows[-1].id if rows else since)


def machine_events(services, machine_id, since=0, limit=100):
    rows = _machine_history(services, machine_id, models.Event, since, limit)
    return [event_dict(ev) for ev in rows], (rows[-1].id if rows else since)
