"""The bearer tokens of the API's two roles: configured, or an admin token
generated once into the state directory."""

import logging
import os
import secrets

LOG = logging.getLogger(__name__)


def api_tokens(conf):
    """(admin tokens, reader tokens); generates an admin token if none is set."""
    admin = [t for t in conf.api.admin_tokens if t]
    reader = [t for t in conf.api.reader_tokens if t]
    if not admin and not reader:
        admin = [generated_admin_token(conf.state_path)]
    return admin, reader


def generated_admin_token(state_path):
    """The admin token in ``state_path``/admin-token, written (mode 0600) if absent."""
    path = os.path.join(state_path, "admin-token")
    os.makedirs(state_path, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        LOG.warning("no API tokens configured: generated an admin token in %s", path)
    with open(path) as f:
        return f.read().strip()


def known_api_tokens(conf):
    """(admin tokens, reader tokens) as :func:`api_tokens` finds them, for a
    process that only tells them apart from other tokens: no token is
    generated."""
    admin = [t for t in conf.api.admin_tokens if t]
    reader = [t for t in conf.api.reader_tokens if t]
    if not admin and not reader:
        try:
            with open(os.path.join(conf.state_path, "admin-token")) as f:
                admin = [f.read().strip()]
        except OSError:
            pass
    return admin, reader
