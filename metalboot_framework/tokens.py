"""Per-machine tokens: what a booting machine proves itself with.

A token is an HMAC of the machine id, its token generation and a boot
interface under a secret kept in the database (so every API and conductor
process signs alike), so nothing secret is stored per machine and bumping the
generation revokes every token the machine had. The token reaches the machine
only inside what it boots through that interface (the artifact URL and the
kernel command line of boot.ipxe). Binding it to the interface keeps a
token read from the script of the interface a machine boots now from
proving a boot through the one it is being migrated to.

Scripts looked up by MAC (for ISOs shared by a partition) are served without
a token. One fetched from an address the machine can have
(:mod:`metalboot_framework.address_binding`) carries the machine's token;
one fetched from any other address carries its *unbound* token instead (an
HMAC over the same values and a scope): it works like the token for fetches
and boot reports, but what carries it is recorded as unverified evidence, so
reading a script by MAC from elsewhere proves nothing.
"""

import hashlib
import hmac
import secrets

from metalboot_framework.store import settings

SECRET_KEY = "machine_token_secret"
#: the scope of a machine's unbound token, and the binding of a by-MAC fetch
#: from an address that is not the machine's (metalboot_framework.artifacts)
UNBOUND = "unbound"


class TokenSigner:
    def __init__(self, secret: bytes):
        if len(secret) < 32:
            raise ValueError("token secret must have at least 32 bytes")
        self._secret = secret

    @classmethod
    def from_database(cls, db):
        """Load the deployment's secret, creating it if this is the first process."""
        return cls(bytes.fromhex(settings.get_or_create(
            db, SECRET_KEY, lambda: secrets.token_hex(32))))

    def machine_token(self, machine_id, generation, interface):
        mac = hmac.new(self._secret, f"{machine_id}:{generation}:{interface}".encode(),
                       hashlib.sha256)
        return mac.hexdigest()[:32]

    def unbound_token(self, machine_id, generation, interface):
        """The token of a by-MAC script served to an address not bound to the
        machine ("/" cannot be in an interface name, which is a URL segment)."""
        return self.machine_token(machine_id, generation, f"{interface}/{UNBOUND}")

    def verify(self, machine_id, generation, interface, token):
        return bool(token) and same_token(
            self.machine_token(machine_id, generation, interface), token)

    def classify(self, machine_id, generation, interface, token, expected=None):
        """True: ``token`` is the machine's own for ``interface``; False: its
        unbound token (what it carries proves nothing); None: neither.
        ``expected``: the machine's own token, if the caller has it (one HMAC
        less)."""
        if not token:
            return None
        if same_token(expected, token) if expected else \
                self.verify(machine_id, generation, interface, token):
            return True
        if same_token(self.unbound_token(machine_id, generation, interface), token):
            return False
        return None


def same_token(expected, given):
    """Constant-time comparison of a token with what a client sent (which may
    hold any character, a lone surrogate from JSON's "\\ud800" too:
    compare_digest refuses non-ASCII strings)."""
    return hmac.compare_digest(expected.encode(),
                               str(given).encode("utf-8", "surrogatepass"))
