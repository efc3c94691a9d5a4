"""Errors the core raises; the API maps each to one HTTP status."""


class MetalbootError(Exception):
    """Base of every error metalboot raises on purpose."""

    code = 500

    def __init__(self, message, fields=None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


class InvalidInput(MetalbootError):
    """A request or a record is malformed (names the offending fields)."""

    code = 422


class Unauthorized(MetalbootError):
    """A missing or unknown token (an API token, or a machine's own)."""

    code = 401


class Forbidden(MetalbootError):
    """A token whose role does not allow the call."""

    code = 403


class NotFound(MetalbootError):
    code = 404


class Gone(MetalbootError):
    """A cursor the server no longer (or not yet) knows: start over."""
    code = 410


class Conflict(MetalbootError):
    """The resource exists already, is locked, or is busy in a migration."""

    code = 409


class Unavailable(MetalbootError):
    """What is asked for cannot be answered now (a boot agent whose data is
    too old); the message says why."""

    code = 503


class PluginLoadError(MetalbootError):
    """An enabled plugin is not installed or fails to import."""


class BootInterfaceError(MetalbootError):
    """A boot-interface step failed; the message says what and where."""


class ValidationFailed(BootInterfaceError):
    """validate() found that a machine cannot use a boot interface."""

    code = 422


class MachineLocked(Conflict):
    """Another writer holds the machine's lock."""


class BmcError(BootInterfaceError):
    """A BMC call failed; the message names the BMC, the system and the call.

    ``address``, ``system`` and ``operation`` (the Redfish property or action,
    e.g. ``Boot.HttpBootUri`` or ``ComputerSystem.Reset``) are kept as
    attributes too. The message never contains the BMC password.
    """

    code = 502

    def __init__(self, message, address=None, system=None, operation=None,
                 status_code=None, fields=None):
        super().__init__(message, fields=fields)
        self.address = address
        self.system = system
        self.operation = operation
        self.status_code = status_code


class BmcConnectionError(BmcError):
    """The BMC did not answer (refused, timed out) even after retries."""


class BmcAuthError(BmcError):
    """The BMC refused the credentials (HTTP 401/403)."""


class BmcUnsupported(BmcError):
    """The BMC or system lacks the property, value or action asked for."""

    code = 422
