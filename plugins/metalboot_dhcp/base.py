"""What ``pxe`` and ``dhcp-httpboot`` share: backends, NIC checks, BMC activation."""

import asyncio
import logging

from metalboot_framework import dhcp
from metalboot_framework.boot_interface import BootInterface, Property
from metalboot_framework.exceptions import (BootInterfaceError, PluginLoadError,
                                            ValidationFailed)
from metalboot_dhcp import bmc as bmc_mod
from metalboot_dhcp import conf as plugin_conf

LOG = logging.getLogger(__name__)


class DhcpBootInterface(BootInterface):
    """Base of the DHCP boot interfaces (not registered itself)."""

    #: [group] of this interface's options.
    conf_group = ""
    #: Redfish BootSourceOverrideTarget activate sets.
    bmc_target = ""

    def options(self, task):
        return plugin_conf.get(task.conf, self.conf_group)

    def dhcp_backends(self, conf):
        """{option name: backend} of the backends this interface's entries go to."""
        raise NotImplementedError

    def common_properties(self):
        return {
            "nics": Property("The machine's NICs: mac (required), duid, ipv4_address, "
                             "ipv6_address; DHCP answers are keyed on them.",
                             required=True),
            "bmc.address": Property("Optional: with a BMC, activate sets the boot "
                                    "override and resets the machine; without one the "
                                    "machine must be reset by someone else."),
            "boot_mode": Property("uefi or bios; the Redfish boot override mode."),
        }

    def _backend(self, conf, option):
        name = getattr(plugin_conf.get(conf, self.conf_group), option)
        try:
            return dhcp.get_backend(name, conf)
        except PluginLoadError as exc:
            raise ValidationFailed(f"[{self.conf_group}] {option}: {exc.message}",
                                   fields={f"[{self.conf_group}] {option}": [exc.message]})

    def validate_nics(self, task):
        if not task.machine.nics:
            raise ValidationFailed(f"machine {task.machine.id} has no NIC; {self.name} "
                                   f"answers DHCP by MAC", fields={"nics": ["required"]})
        for nic in task.machine.nics:
            try:
                dhcp.normalize_mac(nic.mac)
                if nic.duid:
                    dhcp.normalize_duid(nic.duid)
            except ValueError as exc:
                raise ValidationFailed(f"machine {task.machine.id}: {exc}",
                                       fields={"nics": [str(exc)]})

    async def prepare(self, task):
        """Publish the machine's entries; done once the partition's boot agents
        have them on their DHCP servers."""
        agents = await task.apublish_dhcp_entries(self.host_entries(task))
        await task.arecord_event(
            "prepare", f"DHCP entries of {len(task.machine.nics)} NIC(s) applied by boot "
                       f"agent(s) {', '.join(agents)} of partition {task.partition.id}",
            agents=agents)

    # -- activate / clean-up on the BMC -----------------------------------------------
    def activate(self, task):
        if self.options(task).use_bmc and task.machine.bmc and task.machine.bmc.address:
            message = bmc_mod.boot_once_and_reset(task, self.bmc_target)
            task.record_event("activate", message)
        else:
            why = ("it has no BMC address" if self.options(task).use_bmc
                   else f"[{self.conf_group}] use_bmc is off")
            task.record_event(
                "reset_required",
                f"DHCP entries for {self.name} are in place; machine {task.machine.id} "
                f"must be reset by someone else ({why})")

    async def clean_up(self, task):
        errors = []
        try:
            await task.awithdraw_dhcp_entries()
        except BootInterfaceError as exc:
            errors.append(exc.message)
        if self.options(task).use_bmc and task.machine.bmc and task.machine.bmc.address:
            try:
                cleared = await asyncio.to_thread(bmc_mod.clear_override, task,
                                                  self.bmc_target)
                if cleared:
                    await task.arecord_event("clean_up", "cleared " + ", ".join(cleared))
            except BootInterfaceError as exc:
                errors.append(exc.message)
        if errors:
            raise BootInterfaceError(f"{self.name} clean-up of machine {task.machine.id} "
                                     f"incomplete: " + "; ".join(errors))
