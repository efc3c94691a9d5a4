"""The URLs a booting machine, a BMC or a boot script is given.

Every URL starts with the API's public address (``[api] public_url``, else
``http://host_ip:port``), read from the configuration each time.
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

    def artifact_url(self, machine_id, interface, token, name):
        return f"{self.public_url}/boot/{machine_id}/{interface}/{token}/{name}"

    def partition_artifact_url(self, partition_id, interface, name):
        return f"{self.public_url}/boot/partitions/{partition_id}/{interface}/{name}"

    def mac_boot_script_url(self, interface, mac_variable="${net0/mac}"):
        """URL of boot.ipxe looked up by MAC, for scripts shared by a partition.

        ``mac_variable`` is left for iPXE to expand. The server answers only for
        a machine whose boot interface, or active migration's target, is
        ``interface``; the fetch counts as evidence like the per-machine URL
        when it comes from an address bound to the machine
        (:mod:`metalboot_framework.address_binding`), else it is unverified.
        """
        return f"{self.public_url}/boot/mac/{mac_variable}/{interface}/boot.ipxe"

    def report_url(self, machine_id):
        return f"{self.public_url}/v1/machines/{machine_id}/boot-report"
