"""Users and their SCRAM credentials: salted and iterated, never the password itself.

A user holds one credential per SCRAM mechanism (RFC 5802, RFC 7677): a random salt, the
iteration count, and the StoredKey and ServerKey derived from the password. That is what
SCRAM needs to check a client's proof and prove itself back; a PLAIN password is checked
by deriving StoredKey again with the same salt and iterations.
"""

from __future__ import annotations

import hmac
import os
import re

import msgspec
from scramp import ScramMechanism

from huddle.protocol.errors import HuddleError

SCRAM_MECHANISMS: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN = "PLAIN"
MIN_ITERATIONS = 4_096  # RFC 7677's minimum, as Kafka's
DEFAULT_ITERATIONS = 8_192
MAX_ITERATIONS = 1_000_000
MAX_USERNAME = 255
_USERNAME = re.compile(r"[A-Za-z0-9._@+-]+")


class CredentialError(HuddleError, ValueError):
    """A user name, password or iteration count that cannot be used: says why."""


class ScramCredential(msgspec.Struct, frozen=True, kw_only=True):
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class User(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    scram: dict[str, ScramCredential]  # mechanism -> its credential

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


def check_username(name: str) -> str:
    if not name or len(name) > MAX_USERNAME or not _USERNAME.fullmatch(name):
        raise CredentialError(
            f"a user name is 1 to {MAX_USERNAME} of A-Z a-z 0-9 . _ @ + -; got {name!r}"
        )
    return name


def make_user(
    name: str,
    password: str,
    *,
    mechanisms: tuple[str, ...] = SCRAM_MECHANISMS,
    iterations: int = DEFAULT_ITERATIONS,
) -> User:
    """A user with a fresh salt per mechanism. CredentialError for a bad name, an empty
    password, an unknown mechanism or too few iterations."""
    check_username(name)
    if not password:
        raise CredentialError("the password must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(
            f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}; got {iterations}"
        )
    unknown = [m for m in mechanisms if m not in SCRAM_MECHANISMS]
    if unknown or not mechanisms:
        raise CredentialError(
            f"credentials are kept for {', '.join(SCRAM_MECHANISMS)}; got {', '.join(unknown)}"
        )
    scram = {}
    for mechanism in mechanisms:
        salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=os.urandom(32)
        )
        scram[mechanism] = ScramCredential(
            salt=salt, iterations=count, stored_key=stored_key, server_key=server_key
        )
    return User(name=name, scram=scram)


def plain_credential(user: User) -> tuple[str, ScramCredential] | None:
    """The credential a PLAIN password is checked against, with its mechanism: the user's
    first by name (SCRAM-SHA-256 if it has one, else SCRAM-SHA-512); None if it has none."""
    for mechanism in sorted(user.scram):
        return mechanism, user.scram[mechanism]
    return None


def password_matches(user: User, password: str) -> bool:
    """Whether ``password`` is the user's (for PLAIN), checked against its
    ``plain_credential`` in constant time."""
    first = plain_credential(user)
    if first is None:
        return False
    mechanism, kept = first
    _, stored_key, _, _ = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=kept.iterations, salt=kept.salt
    )
    return hmac.compare_digest(stored_key, kept.stored_key)
