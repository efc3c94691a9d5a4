"""A deliberately broken boot interface for the e2e tests: ``e2e-http-url-404``.

It is ``redfish-http-url`` in every respect (validate, prepare, BMC override
UefiHttp + HttpBootUri, reset, clean_up) except that the URI it gives the BMC
names a per-machine artifact the server does not have, so the firmware's HTTP
boot client gets **404** and the machine never proves the new path: the
migration must time out, roll back, and the machine boot through its previous
interface again.

Installed the way a third party installs a plugin: an entry point in
``metalboot.boot_interfaces`` (``metalboot_e2e-0.1.dist-info`` next to this
file, put on the server's PYTHONPATH by the e2e harness only).
"""

from metalboot_redfish.http_url import RedfishHttpUrlBootInterface

MISSING = "missing-e2e.iso"


class BrokenHttpUrlBootInterface(RedfishHttpUrlBootInterface):
    """redfish-http-url whose HttpBootUri answers 404 (e2e test only)."""

    evidence_artifacts = (MISSING,)

    def artifact_name(self, conf):
        return MISSING

    def get_artifact(self, task, name):
        return None  # the server answers 404 for every artifact of this interface
