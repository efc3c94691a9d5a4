"""World snapshots the conformance tests share: a system on a Redfish BMC emulator."""


def bmc_system_world(emulator, system_uuid, media=False):
    """What a BMC does with the system's next boot, as a comparable dict.

    The boot override is compared by effect: with ``BootSourceOverrideEnabled``
    ``Disabled`` the BMC ignores target and mode (Redfish), so a disabled
    override is just ``Disabled`` whatever target it still names.
    ``HttpBootUri`` is kept in any case (a URL left behind is a leak even when
    unused), and so is the power state.
    """
    system = emulator.system(system_uuid)
    boot = system.get("Boot") or {}
    enabled = boot.get("BootSourceOverrideEnabled")
    if enabled in (None, "Disabled"):
        override = "Disabled"
    else:
        override = (boot.get("BootSourceOverrideTarget"), enabled,
                    boot.get("BootSourceOverrideMode"))
    world = {"override": override, "http_boot_uri": boot.get("HttpBootUri"),
             "power": system.get("PowerState")}
    if media:
        world["media"] = {device: (m.get("Inserted"), m.get("Image"))
                          for device, m in sorted(emulator.media(system_uuid).items())}
    return world


def without_power(world):
    """``world`` without the power state of BMC systems: activate resets (powers on)
    the machine, and clean_up does not power it off again, nor should it."""
    return {key: ({k: v for k, v in value.items() if k != "power"}
                  if key.startswith("bmc ") else value)
            for key, value in world.items()}
