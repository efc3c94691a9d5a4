"""The conformance kit against ``pxe`` and ``dhcp-httpboot``.

The world of these interfaces is what their DHCP servers load: the files the
dnsmasq backend writes into ``--dhcp-hostsdir`` / ``--dhcp-optsdir`` and the
host reservations in Kea's include file. The backends are file-level, so the
first two classes need no running server (Kea's ``[kea] reload = none``) and
no network: machines without a BMC, whose activate only records that someone
else must reset them.

The ``functional`` classes run the full contract: a running dnsmasq and Kea
(``tests/functional/dhcp`` fixtures, network namespaces, root), whose live
reservations (Kea ``config-get``) are part of the world, and machines with a
BMC (a sushy-emulator from ``tests/functional/redfish``) whose boot override
activate sets and clean_up clears.
"""

import json
import os

import pytest

from metalboot_framework.dhcp.kea import KeaBackend
from metalboot_framework.testing.conformance import (BootInterfaceConformance, close_services,
                                                     make_services)
# conftest.py puts tests/functional/redfish on sys.path and provides its fixtures
from redfish_emulator_harness import BMC_PASSWORD, BMC_USER, fake_system
from tests.dhcp_agent import LocalDhcpAgent
from tests.conformance.worlds import bmc_system_world, without_power

DNSMASQ_HEADER = "# metalboot: "


class DhcpFilesWorld:
    """World = the DHCP servers' inputs metalboot writes (mixin for the kit),
    written by the DHCP half of a boot agent running beside the checks."""

    @pytest.fixture(autouse=True)
    def _dhcp_agent(self, conformance_services):
        with LocalDhcpAgent(conformance_services) as agent:
            yield agent

    def dhcp_paths(self, tmp_path):
        """(hostsdir, optsdir, kea include file); created, the include file empty."""
        root = tmp_path / "dhcp"
        hosts, opts, kea_dir = root / "hosts", root / "opts", root / "kea"
        for d in (hosts, opts, kea_dir):
            d.mkdir(parents=True, exist_ok=True)
        include = kea_dir / "metalboot-reservations6.json"
        include.write_text("")
        return hosts, opts, include

    def dhcp_options(self, tmp_path):
        hosts, opts, include = self.dhcp_paths(tmp_path)
        self.watched = {"dnsmasq-hosts": hosts, "dnsmasq-opts": opts, "kea": include.parent}
        self.kea_include = include
        efi = tmp_path / "ipxe.efi"
        efi.write_bytes(b"MZ" + b"\0" * 510)
        return {"dnsmasq": {"hostsdir": str(hosts), "optsdir": str(opts)},
                "kea": {"include_file": str(include), "reload": "none"},
                "dhcp": {"ipv6_dns_servers": ["fd00:b::53"], "ipv4_dns_servers": ["10.0.0.53"]},
                "dhcp_httpboot": {"ipxe_efi_path": str(efi)}}

    def conformance_options(self, tmp_path):
        return self.dhcp_options(tmp_path)

    def snapshot_world(self):
        world = {}
        for label, directory in self.watched.items():
            for name in sorted(os.listdir(directory)):
                if name.startswith("."):
                    continue  # temporary files and dnsmasq's lock: never read by a server
                if label == "kea" and not name.startswith(self.kea_include.name):
                    continue  # Kea's own files (log, leases) beside metalboot's
                path = os.path.join(directory, name)
                if path == str(self.kea_include):
                    with open(path) as f:  # what Kea loads: the reservations, not the text
                        world["kea reservations"] = KeaBackend._parse(f.read(), path)
                    continue
                with open(path) as f:
                    world[f"{label}/{name}"] = f.read()
        return world

    def without_declared_residue(self, world):
        """Declared leftovers of clean_up, neither of which any server acts on:

        - a dnsmasq *tombstone*: removal rewrites the machine's host file so
          that its MACs set only the tag ``<managed_tag>-removed``, which no
          option uses, because dnsmasq keeps removed lines in memory until it
          restarts; the backend deletes tombstones after a restart
          (``[dnsmasq] pid_file``);
        - the Kea backend's lock file beside the include file.
        """
        kept = {}
        for key, value in world.items():
            if key.endswith(".lock"):
                continue
            if key.startswith("dnsmasq-hosts/") and value.startswith(DNSMASQ_HEADER):
                meta = json.loads(value.splitlines()[0][len(DNSMASQ_HEADER):])
                if meta.get("removed"):
                    continue
            kept[key] = value
        return kept


class TestPxeConformance(DhcpFilesWorld, BootInterfaceConformance):
    interface_name = "pxe"
    other_interface = "dhcp-httpboot"

    def machine_fields(self, index):
        return {"boot_interface": self.interface_name, "boot_mode": "bios",
                "nics": [{"mac": f"52:54:00:d0:{index:02x}:01"},
                         {"mac": f"52:54:00:d0:{index:02x}:02"}]}

    def invalid_machine_fields(self):
        return {"boot_interface": self.interface_name, "nics": []}

    def test_world_is_observed(self):
        """The world this class compares is where prepare writes."""
        before = self.snapshot_world()
        self.step("prepare", self.task)
        after = self.snapshot_world()
        assert set(after) - set(before) == {f"dnsmasq-hosts/metalboot-{self.task.machine.id}",
                                            f"dnsmasq-opts/metalboot-{self.task.machine.id}.pxe"}


class TestDhcpHttpBootConformance(DhcpFilesWorld, BootInterfaceConformance):
    interface_name = "dhcp-httpboot"
    other_interface = "pxe"

    def machine_fields(self, index):
        return {"boot_interface": self.interface_name, "boot_mode": "uefi",
                "nics": [{"mac": f"52:54:00:d1:{index:02x}:01",
                          "duid": f"00:03:00:01:52:54:00:d1:{index:02x}:01",
                          "ipv4_address": f"10.0.{index}.5"},
                         {"mac": f"52:54:00:d1:{index:02x}:02"}]}

    def invalid_machine_fields(self):
        fields = self.machine_fields(7)
        fields["boot_mode"] = "bios"
        return fields

    def test_world_is_observed(self):
        before = self.snapshot_world()
        self.step("prepare", self.task)
        after = self.snapshot_world()
        assert len(after["kea reservations"]) == len(before["kea reservations"]) + 2
        assert f"dnsmasq-opts/metalboot-{self.task.machine.id}.dhcp-httpboot" in after


# -- with running servers and a BMC -------------------------------------------------------------
class DhcpServersAndBmcWorld(DhcpFilesWorld):
    """World = the files, Kea's live reservations and the BMC's boot settings."""

    @pytest.fixture
    def conformance_services(self, tmp_path, dnsmasq, kea, sushy_emulator_with_http_boot_uri):
        self.kea_daemon = kea
        # 0: the machine under test, 1: the bystander, 2: for invalid_machine_fields
        self.systems = [fake_system(f"dhcp-conformance-{i}") for i in range(3)]
        self.emulator = sushy_emulator_with_http_boot_uri(self.systems)
        options = self.dhcp_options(tmp_path)
        self.watched = {"dnsmasq-hosts": dnsmasq.hostsdir, "dnsmasq-opts": dnsmasq.optsdir,
                        "kea": kea.include.parent}
        self.kea_include = kea.include
        options["dnsmasq"] = {"hostsdir": str(dnsmasq.hostsdir),
                              "optsdir": str(dnsmasq.optsdir),
                              "pid_file": str(dnsmasq.pid_file)}
        options["kea"] = {"include_file": str(kea.include), "reload": "control-socket",
                          "control_socket": str(kea.socket)}
        options["bmc"] = {"connect_timeout": 2.0, "read_timeout": 5.0, "retry_attempts": 3,
                          "retry_interval": 0.05, "retry_max_interval": 0.2,
                          "power_poll_interval": 0.05, "power_timeout": 10.0}
        services = make_services(tmp_path / "metalboot-state",
                                 [self.interface_name, self.other_interface], options=options)
        yield services
        close_services(services)

    def machine_fields(self, index):
        fields = super().machine_fields(index)
        system = self.systems[min(index, 2)]
        fields["bmc"] = {"address": self.emulator.url, "username": BMC_USER,
                         "password": BMC_PASSWORD, "verify_tls": False}
        fields["properties"] = {"redfish_system_id": system["uuid"]}
        return fields

    def snapshot_world(self):
        world = super().snapshot_world()
        answer = self.kea_daemon.command("config-get")
        answer = answer[0] if isinstance(answer, list) else answer
        assert answer["result"] == 0, answer
        world["kea running reservations"] = [
            res for subnet in answer["arguments"]["Dhcp6"]["subnet6"]
            for res in subnet.get("reservations", [])]
        for system in self.systems:
            world[f"bmc {system['name']}"] = bmc_system_world(self.emulator, system["uuid"])
        return world

    def without_declared_residue(self, world):
        """Also the machines' power state (see ``worlds.without_power``)."""
        return without_power(super().without_declared_residue(world))


@pytest.mark.functional
class TestPxeWithServersAndBmcConformance(DhcpServersAndBmcWorld, TestPxeConformance):
    pass


@pytest.mark.functional
class TestDhcpHttpBootWithServersAndBmcConformance(DhcpServersAndBmcWorld,
                                                   TestDhcpHttpBootConformance):
    def test_world_is_observed(self):
        super().test_world_is_observed()
        world = self.snapshot_world()
        assert len(world["kea running reservations"]) == 2   # Kea reloaded the file
        self.interface.activate(self.task)
        name = self.systems[0]["name"]
        assert self.snapshot_world()[f"bmc {name}"]["override"] == ("UefiHttp", "Once", "UEFI")
