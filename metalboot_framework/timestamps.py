"""Timestamps as the API, the hooks and the logs write them."""


def iso(value):
    """A stored (UTC) datetime as ISO 8601 with milliseconds and ``Z``; None stays None."""
    if value is None:
        return None
    return value.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
