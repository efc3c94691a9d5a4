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


class NotFound(MetalbootError):
    code = 404


class Conflict(MetalbootError):
    """The resource exists already, is locked, or is busy in a migration."""

    code = 409


class PluginLoadError(MetalbootError):
    """An enabled plugin is not installed or fails to import."""


class BootInterfaceError(MetalbootError):
    """A boot-interface step failed; the message says what and where."""


class ValidationFailed(BootInterfaceError):
    """validate() found that a machine cannot use a boot interface."""

    code = 422


class MachineLocked(Conflict):
    """Another writer holds the machine's lock."""
