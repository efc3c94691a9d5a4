"""Per-machine tokens: what a booting machine proves itself with.

A token is an HMAC of the machine id and its token generation under a secret
kept in the database (so every API and conductor process signs alike), so
nothing secret is stored per machine and bumping the generation revokes every
token the machine had. The token reaches
the machine only inside what it boots (the artifact URL and the kernel command
line of boot.ipxe), never from an unauthenticated endpoint.
"""

import hashlib
import hmac
import secrets

import sqlalchemy.exc

from metalboot_framework.store import models

SECRET_KEY = "machine_token_secret"


class TokenSigner:
    def __init__(self, secret: bytes):
        if len(secret) < 32:
            raise ValueError("token secret must have at least 32 bytes")
        self._secret = secret

    @classmethod
    def from_database(cls, db):
        """Load the deployment's secret, creating it if this is the first process."""
        for _ in range(2):
            try:
                with db.write() as session:
                    row = session.get(models.Setting, SECRET_KEY)
                    if row is None:
                        row = models.Setting(key=SECRET_KEY, value=secrets.token_hex(32))
                        session.add(row)
                    secret = row.value
                return cls(bytes.fromhex(secret))
            except sqlalchemy.exc.IntegrityError:
                continue  # another process created it first: read theirs
        raise RuntimeError("cannot read or create the machine token secret")

    def machine_token(self, machine_id, generation):
        mac = hmac.new(self._secret, f"{machine_id}:{generation}".encode(), hashlib.sha256)
        return mac.hexdigest()[:32]

    def verify(self, machine_id, generation, token):
        return bool(token) and hmac.compare_digest(
            self.machine_token(machine_id, generation), str(token))
