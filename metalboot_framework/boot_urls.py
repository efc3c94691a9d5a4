"""The URLs a booting machine, a BMC or a boot script is given.

Every URL starts with the base URL of the machine's partition: its boot
agents' address (the partition's ``boot_url``) where it has one, else the
API's public address (``[api] public_url``, else ``http://host_ip:port``),
read from the configuration each time.
"""


class BootUrls:
    """The boot, artifact and report URLs of this deployment."""

    def __init__(self, conf):
        self.conf = conf

    @property
    def public_url(self):
        if self.conf.api.public_url:
            return self.conf.api.public_url.rstrip("/")
        host = self.conf.api.host_ip
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.conf.api.port}"

    def base_url(self, partition=None):
        """Where the machines of ``partition`` (a PartitionInfo, or None) boot
        from: its ``boot_url``, else :attr:`public_url`."""
        boot_url = getattr(partition, "boot_url", None)
        return boot_url.rstrip("/") if boot_url else self.public_url

    def artifact_url(self, machine_id, interface, token, name, partition=None):
        return f"{self.base_url(partition)}/boot/{machine_id}/{interface}/{token}/{name}"

    def partition_artifact_url(self, partition_id, interface, name, partition=None):
        return f"{self.base_url(partition)}/boot/partitions/{partition_id}/{interface}/{name}"

    def mac_boot_script_url(self, interface, mac_variable="${net0/mac}", partition=None):
        """URL of boot.ipxe looked up by MAC, for scripts shared by a partition.

        ``mac_variable`` is left for iPXE to expand. The server answers only for
        a machine whose boot interface, or active migration's target, is
        ``interface``; the fetch counts as evidence like the per-machine URL
        when it comes from an address bound to the machine
        (:mod:`metalboot_framework.address_binding`), else it is unverified.
        """
        return f"{self.base_url(partition)}/boot/mac/{mac_variable}/{interface}/boot.ipxe"

    def report_url(self, machine_id, partition=None):
        return f"{self.base_url(partition)}/v1/machines/{machine_id}/boot-report"
