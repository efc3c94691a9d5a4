"""Per-machine tokens: what a booting machine proves itself with.

A token is an HMAC of the machine id and its token generation under a secret
kept in the state directory, so nothing secret is stored per machine and
bumping the generation revokes every token the machine had. The token reaches
the machine only inside what it boots (the artifact URL and the kernel command
line of boot.ipxe), never from an unauthenticated endpoint.
"""

import hashlib
import hmac
import os
import secrets


class TokenSigner:
    def __init__(self, secret: bytes):
        if len(secret) < 32:
            raise ValueError("token secret must have at least 32 bytes")
        self._secret = secret

    @classmethod
    def from_state_dir(cls, state_path):
        """Load the secret from ``<state_path>/token-secret``, creating it once."""
        path = os.path.join(state_path, "token-secret")
        os.makedirs(state_path, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        with open(path, "rb") as f:
            return cls(f.read())

    def machine_token(self, machine_id, generation):
        mac = hmac.new(self._secret, f"{machine_id}:{generation}".encode(), hashlib.sha256)
        return mac.hexdigest()[:32]

    def verify(self, machine_id, generation, token):
        return bool(token) and hmac.compare_digest(
            self.machine_token(machine_id, generation), str(token))
