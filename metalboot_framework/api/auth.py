"""Bearer tokens with two roles: ``reader`` may read, ``admin`` may change;
and the tokens of partitions' boot agents, which may only read their
partition's boot data and deliver its evidence
(:mod:`metalboot_framework.agent_tokens`)."""

import hmac

from flask import current_app, request

from metalboot_framework import agent_tokens
from metalboot_framework.exceptions import Forbidden, Unauthorized

__all__ = ["Forbidden", "Unauthorized", "bearer_token", "require", "require_agent",
           "role_among", "role_of"]

AGENT_ONLY = ("an agent token may only read its partition's boot data and deliver its "
              "evidence (/v1/partitions/{id}/boot-data...)")


def _matches(token, candidates):
    found = False
    for candidate in candidates:
        # compare against every candidate: the time taken says nothing
        # (a token from a JSON body may hold a lone surrogate: not UTF-8 text)
        found |= hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                     candidate.encode())
    return found


def bearer_token():
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def role_of(token):
    """"admin", "reader", ("agent", partition id) or None."""
    role = role_among(current_app.config["METALBOOT_TOKENS"], token)
    if role is None and token.startswith(agent_tokens.TOKEN_PREFIX):
        partition = agent_tokens.partition_of(current_app.extensions["metalboot"], token)
        if partition is not None:
            return ("agent", partition)
    return role


def role_among(tokens, token):
    """The role of ``token`` among ``tokens`` (admin tokens, reader tokens), or None
    (what a process without the database knows: the boot server's)."""
    admin, reader = tokens
    if _matches(token, admin):
        return "admin"
    if _matches(token, reader):
        return "reader"
    return None


def _role():
    token = bearer_token()
    if token is None:
        raise Unauthorized("this endpoint needs a bearer token (Authorization: Bearer ...)")
    have = role_of(token)
    if have is None:
        raise Unauthorized("unknown token")
    return have


def require(role):
    """Raise 401 without a known token, 403 when its role is not enough."""
    have = _role()
    if isinstance(have, tuple):
        raise Forbidden(AGENT_ONLY)
    if role == "admin" and have != "admin":
        raise Forbidden("this endpoint needs an admin token; the token given is a reader's")
    return have


def require_agent(partition_id):
    """An admin token, or the agent token of ``partition_id``."""
    have = _role()
    if have == "admin":
        return have
    if not isinstance(have, tuple):
        raise Forbidden("this endpoint needs the partition's agent token or an admin token")
    if have[1] != partition_id:
        raise Forbidden(f"this agent token belongs to partition {have[1]}, "
                        f"not to {partition_id}")
    return have
