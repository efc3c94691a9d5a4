"""Bearer tokens with two roles: ``reader`` may read, ``admin`` may change."""

import hmac

from flask import current_app, request

from metalboot_framework.exceptions import Forbidden, Unauthorized

__all__ = ["Forbidden", "Unauthorized", "bearer_token", "require", "role_among", "role_of"]


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
    return role_among(current_app.config["METALBOOT_TOKENS"], token)


def role_among(tokens, token):
    """The role of ``token`` among ``tokens`` (admin tokens, reader tokens), or None."""
    admin, reader = tokens
    if _matches(token, admin):
        return "admin"
    if _matches(token, reader):
        return "reader"
    return None


def require(role):
    """Raise 401 without a known token, 403 when its role is not enough."""
    token = bearer_token()
    if token is None:
        raise Unauthorized("this endpoint needs a bearer token (Authorization: Bearer ...)")
    have = role_of(token)
    if have is None:
        raise Unauthorized("unknown token")
    if role == "admin" and have != "admin":
        raise Forbidden("this endpoint needs an admin token; the token given is a reader's")
    return have
