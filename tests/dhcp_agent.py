"""The DHCP half of a boot agent in the test's own process.

For tests that call the DHCP interfaces' steps directly: prepare and clean-up
publish entries and wait for the partition's agents. This runs the agent's own
:class:`~metalboot_framework.agent.dhcp_sync.DhcpApplier` on the boot data
that :mod:`metalboot_framework.partition_data` gives the agents' API (snapshot,
then the change feed), and reports through
:func:`metalboot_framework.partition_dhcp.record_report`, in a thread. The
agent process with its HTTP client is proven by ``tests/functional/dhcp``.
"""

import threading

from metalboot_framework import partition_data, partition_dhcp
from metalboot_framework.agent.dhcp_sync import DhcpApplier, configured_backends, wanted
from metalboot_framework.exceptions import NotFound


class LocalDhcpAgent:
    def __init__(self, services, partitions=("p1",), agent_id="local-agent"):
        self.services = services
        self.partitions = list(partitions)
        self.agent_id = agent_id
        self.backends = configured_backends(services)
        self.applier = DhcpApplier(self.backends)
        self.cursors = {}
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="local-dhcp")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _once(self, partition_id):
        # the backends as the configuration names them now (tests change it)
        self.backends = self.applier.backends = configured_backends(self.services)
        cursor = self.cursors.get(partition_id)
        if cursor is None:
            document = partition_data.snapshot(self.services, partition_id)
            desired = {m["id"]: wanted(m, self.backends) for m in document["machines"]}
            count = self.applier.apply(partition_id, True, desired, set())
            cursor = document["cursor"]
        else:
            changes = partition_data.changes(self.services, partition_id, cursor)
            records = {m["id"]: m for m in changes["machines"]}
            desired = {mid: wanted(records.get(mid), self.backends)
                       for mid in list(records) + changes["removed"]}
            count = self.applier.apply(partition_id, False, desired, set())
            cursor = changes["cursor"]
        self.cursors[partition_id] = cursor
        self._report(partition_id, count, None)

    def _report(self, partition_id, count, error):
        partition_dhcp.record_report(self.services, partition_id, {
            "agent": self.agent_id, "cursor": self.cursors.get(partition_id) or 0,
            "interfaces": sorted(self.backends), "entries": count, "error": error})

    def _loop(self):
        while not self._stop.wait(0.05):
            for partition_id in self.partitions:
                try:
                    self._once(partition_id)
                except NotFound:
                    pass  # the test has not made the partition yet
                except Exception as exc:  # reported, as the agent does: the step names it
                    self.errors.append(exc)
                    try:
                        self._report(partition_id, 0, getattr(exc, "message", str(exc)))
                    except NotFound:
                        pass
