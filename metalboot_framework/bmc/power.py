"""Power on, off and reset, polling until the BMC shows the new state.

BMCs apply power changes late (sushy-tools' fake driver after 1-11 s, iDRAC
sometimes after a minute), so each call polls ``PowerState`` every
``[bmc] power_poll_interval`` seconds for up to ``[bmc] power_timeout``, the
first time one interval after the change was requested.
"""

import logging
import time

import sushy
from sushy import ResetType

from metalboot_framework.bmc import retry as retry_mod
from metalboot_framework.bmc.client import LINKS, POWER
from metalboot_framework.exceptions import BmcError

LOG = logging.getLogger(__name__)

ON, OFF = "On", "Off"


def power_state(client, reuse=False):
    """The system's PowerState, read now; with ``reuse``, the one of a document
    the client read moments ago (see BmcClient.recent_system) if there is one."""
    recent = client.recent_system(POWER) if reuse else None
    if recent is not None:
        return recent.data.get("PowerState")

    def read(conn):
        system, _ = client.system_json(conn)
        return system.get("PowerState")
    return client.run("read PowerState", read)


def _reset_action(client, conn):
    """(allowed ResetTypes, send(ResetType)) of the system's ComputerSystem.Reset.

    The allowed types and the action's target come from any read of the
    system: they do not change. Where the document lists them, the POST goes
    straight to the target; building sushy's System instead would read the
    system's settings object again on BMCs that advertise one (iDRAC10), and
    the service root. Types given only by the action's @Redfish.ActionInfo
    (Supermicro X11) are read there, once per connection."""
    doc = client.recent_system(LINKS) or client.system_document(conn)
    action = (doc.data.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
    listed, target = action.get("ResetType@Redfish.AllowableValues"), action.get("target")
    if not listed and target and action.get("@Redfish.ActionInfo"):
        listed = _action_info_values(client, conn, action["@Redfish.ActionInfo"])
    if not listed or not target:
        system = client.sushy_system(conn, reuse=LINKS)
        return system.get_allowed_reset_system_values(), system.reset_system
    allowed = {kind for kind in ResetType if kind.value in listed}
    return allowed, lambda kind: conn.connector.post(target, data={"ResetType": kind.value})


def _action_info_values(client, conn, path):
    """The ResetType values the ActionInfo at ``path`` allows; every type when
    it is not served or names none (as sushy assumes then)."""
    known = client.fact(conn, "reset types")
    if known is not None:
        return known
    try:
        info = client.read(conn, path).data
    except sushy.exceptions.ResourceNotFoundError:
        info = {}
    values = next((p.get("AllowableValues") for p in info.get("Parameters") or []
                   if isinstance(p, dict) and p.get("Name") == "ResetType"), None)
    if not values:
        LOG.warning("%s: ComputerSystem.Reset's ActionInfo %s names no ResetType "
                    "values; trying them all", client.where, path)
        values = [kind.value for kind in ResetType]
    values = tuple(values)
    client.learn(conn, "reset types", values)
    return values


def _reset(client, choices, operation):
    """POST the first allowed reset type, once: a reset the BMC may have done
    (no answer within the read timeout) is not sent again; the caller's wait
    for the power state decides. Returns the type sent."""
    sent = []

    def post(conn):
        allowed, send = _reset_action(client, conn)
        for choice in choices:
            if choice in allowed:
                client.changed(POWER)
                sent[:] = [choice.value]
                send(choice)
                return choice.value
        raise BmcError(
            f"{client.where}: ComputerSystem.Reset allows none of "
            f"{', '.join(c.value for c in choices)} "
            f"(allowed: {', '.join(sorted(a.value for a in allowed))})",
            address=client.address, system=client.system_label,
            operation="ComputerSystem.Reset")
    try:
        return client.run(operation, post, idempotent=False)
    except retry_mod.OutcomeUnknown as unknown:
        LOG.warning("BMC %s system %s: %s: %s; not sent again, reading the power state "
                    "instead", client.address, client.system_label, operation, unknown)
        return sent[0] if sent else None


def wait_for(client, expected, timeout=None, interval=None, since=None):
    """Poll PowerState until it is ``expected``; BmcError after the timeout.

    The first read is one ``interval`` after ``since`` (when the change was
    requested): no BMC shows a power change the moment it accepted it.
    """
    timeout = client.conf.bmc.power_timeout if timeout is None else timeout
    interval = client.conf.bmc.power_poll_interval if interval is None else interval
    start = since or time.monotonic()
    time.sleep(max(0.0, start + min(interval, timeout) - time.monotonic()))
    state = None
    while True:
        state = power_state(client)
        if state == expected:
            return state
        if time.monotonic() - start >= timeout:
            raise BmcError(
                f"{client.where}: PowerState is "
                f"{state} {timeout:g} s after the ComputerSystem.Reset, expected {expected}",
                address=client.address, system=client.system_label,
                operation="ComputerSystem.Reset")
        time.sleep(interval)


def power_on(client, wait=True):
    if power_state(client) == ON:
        return ON
    started = time.monotonic()
    _reset(client, (ResetType.ON, ResetType.FORCE_ON), "POST ComputerSystem.Reset (On)")
    return wait_for(client, ON, since=started) if wait else None


def power_off(client, wait=True):
    if power_state(client) == OFF:
        return OFF
    started = time.monotonic()
    _reset(client, (ResetType.FORCE_OFF,), "POST ComputerSystem.Reset (ForceOff)")
    return wait_for(client, OFF, since=started) if wait else None


def reset(client, wait=True):
    """Restart the system (power it on if it is off); wait until it is On.

    An override that had to fall back from Continuous to Once is re-applied
    first, so that every boot takes it.
    """
    client.reapply_once_override()
    started = time.monotonic()
    # the system was read moments ago by most callers (to set the boot override)
    if power_state(client, reuse=True) != ON:
        _reset(client, (ResetType.ON, ResetType.FORCE_ON), "POST ComputerSystem.Reset (On)")
    else:
        kind = _reset(client, (ResetType.FORCE_RESTART, ResetType.POWER_CYCLE),
                      "POST ComputerSystem.Reset (ForceRestart)")
        LOG.debug("BMC %s system %s: reset with %s", client.address, client.system_label,
                  kind)
    return wait_for(client, ON, since=started) if wait else None
