"""One SASL exchange on the coordinator's side: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN.

``SaslSession.step`` takes one client message and returns the answer and whether the
exchange is over; it raises ``AuthenticationFailedError`` with the reason, which is for the log
only: the client is told one thing whatever was wrong. An unknown user goes through the
whole exchange with a made-up credential (``decoy``) and fails at the proof, as a wrong
password does, so the answers do not tell who exists. SCRAM itself (nonces, proofs, the
server signature) is the ``scramp`` library's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from typing import NamedTuple

from scramp import ScramException, ScramMechanism

from huddle.coordinator.security.credentials import (
    DEFAULT_ITERATIONS,
    PLAIN,
    SCRAM_MECHANISMS,
    ScramCredential,
    User,
    password_matches,
)
from huddle.protocol.errors import HuddleError, InvalidArgumentError

UserLookup = Callable[[str], User | None]


class DecoyShape(NamedTuple):
    """How a made-up credential is made: the mechanism whose hash derives its key, and its
    iteration count (for SCRAM, the exchange's own mechanism; for PLAIN, the one most
    users' PLAIN checks derive with), so that checking it is the same work as a real one."""

    mechanism: str
    iterations: int


def decoy(secret: bytes, username: str, mechanism: str, iterations: int) -> ScramCredential:
    """The credential told for a user that does not exist, as a real user's looks: a salt
    of a real salt's length, its own per mechanism (a real user's salts differ between
    SCRAM-SHA-256 and SCRAM-SHA-512), the same for a name every time (made from the
    server's secret), and random keys no password's proof matches."""
    salt = hmac.new(secret, f"{mechanism}\0{username}".encode(), hashlib.sha256).digest()
    return ScramCredential(
        salt=salt, iterations=iterations, stored_key=os.urandom(64), server_key=os.urandom(64)
    )


class AuthenticationFailedError(HuddleError):
    """The exchange failed; ``reason`` says why, for the coordinator's log."""

    def __init__(self, reason: str, username: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.username = username


class SaslSession:
    """The server's half of one exchange. ``principal`` is set once it succeeded."""

    def __init__(
        self,
        mechanism: str,
        users: UserLookup,
        secret: bytes,
        decoy_shape: DecoyShape | None = None,
    ) -> None:
        self.mechanism = mechanism
        # The credential made up for a user that does not exist is like most users' for
        # this mechanism (the count told, the work of a PLAIN check), so it tells nothing.
        self.decoy_shape = decoy_shape or DecoyShape(
            mechanism if mechanism in SCRAM_MECHANISMS else SCRAM_MECHANISMS[0],
            DEFAULT_ITERATIONS,
        )
        self.username = ""
        self.principal = ""
        self.done = False
        self._users = users
        self._secret = secret
        self._scram = None
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramMechanism(mechanism).make_server(self._scram_credential)
        elif mechanism != PLAIN:
            raise InvalidArgumentError(f"not a SASL mechanism huddle serves: {mechanism}")
        self._stage = 0

    @property
    def checks_password(self) -> bool:
        """Whether the next step checks the password (a SCRAM proof, a PLAIN password):
        its answer tells a guesser whether the guess was right."""
        return self._scram is None or self._stage == 1

    @property
    def costly(self) -> bool:
        """Whether a step derives a key (PLAIN: PBKDF2), and so belongs off the event loop."""
        return self._scram is None

    def step(self, data: bytes) -> tuple[bytes, bool]:
        """The answer to one client message, and whether the exchange is complete."""
        if self.done:
            raise AuthenticationFailedError("a message after the exchange was complete")
        try:
            if self._scram is None:
                return self._plain(data), True
            return self._scram_step(data)
        except AuthenticationFailedError as exc:
            exc.username = exc.username or self.username
            raise

    # --- PLAIN (RFC 4616) -------------------------------------------------------------

    def _plain(self, data: bytes) -> bytes:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailedError("a PLAIN message is authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailedError("a PLAIN message that is not UTF-8") from None
        self.username = user
        if authzid and authzid != user:
            raise AuthenticationFailedError(f"authorization id {authzid!r} is not the user")
        kept = self._users(user)
        if kept is None:  # the same work as most real checks: one key, the same hash and count
            hashed, iterations = self.decoy_shape
            fake = decoy(self._secret, user, hashed, iterations)
            password_matches(User(name=user, scram={hashed: fake}), password)
            raise AuthenticationFailedError("unknown user")
        if not password_matches(kept, password):
            raise AuthenticationFailedError("wrong password")
        self._succeed(user)
        return b""

    # --- SCRAM (RFC 5802, RFC 7677) -----------------------------------------------------

    def _scram_step(self, data: bytes) -> tuple[bytes, bool]:
        server = self._scram
        assert server is not None
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailedError("a SCRAM message that is not UTF-8") from None
        try:
            if self._stage == 0:
                self._stage = 1
                server.set_client_first(text)
                return server.get_server_first().encode(), False
            if self._stage == 1:
                self._stage = 2
                server.set_client_final(text)
                final = server.get_server_final().encode()
        except ScramException as exc:
            raise AuthenticationFailedError(f"SCRAM: {exc}") from None
        if self._stage != 2:
            raise AuthenticationFailedError("a SCRAM message after the exchange")
        if self._users(self.username) is None:  # the decoy's proof cannot match; to be sure
            raise AuthenticationFailedError("unknown user")
        self._succeed(self.username)
        return final, True

    def _scram_credential(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        self.username = username
        kept = self._users(username)
        credential = None if kept is None else kept.scram.get(self.mechanism)
        if credential is None:  # the client cannot tell the user does not exist
            iterations = self.decoy_shape.iterations
            credential = decoy(self._secret, username, self.mechanism, iterations)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _succeed(self, username: str) -> None:
        self.done = True
        self.principal = f"User:{username}"
