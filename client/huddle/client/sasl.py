"""The client's half of a SASL exchange: SCRAM-SHA-256/512 (``scramp``) or PLAIN.

``first()`` is the first message; ``answer(challenge, complete=...)`` checks what the
coordinator sent and returns the next message, or None when nothing more is to be sent.
A SCRAM client checks the coordinator's final signature: a coordinator that does not
know the password cannot forge it, and the exchange fails (SaslAuthenticationFailedError).
"""

from __future__ import annotations

from scramp import ScramClient, ScramException

from huddle.protocol.errors import SaslAuthenticationFailedError


class SaslExchange:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._plain = mechanism == "PLAIN"
        self._username = username
        self._password = password
        self._scram = None if self._plain else ScramClient([mechanism], username, password)
        self._stage = 0

    def first(self) -> bytes:
        if self._scram is None:
            return b"\0" + self._username.encode() + b"\0" + self._password.encode()
        return str(self._scram.get_client_first()).encode()

    def answer(self, challenge: bytes, *, complete: bool) -> bytes | None:
        scram = self._scram
        if scram is None:
            return None
        try:
            if self._stage == 0 and not complete:
                self._stage = 1
                scram.set_server_first(challenge.decode())
                return str(scram.get_client_final()).encode()
            if self._stage == 1 and complete:
                self._stage = 2
                scram.set_server_final(challenge.decode())
                return None
        except (ScramException, UnicodeDecodeError) as exc:
            raise SaslAuthenticationFailedError(
                f"the coordinator's SCRAM answer does not check: {exc}"
            ) from None
        raise SaslAuthenticationFailedError("the coordinator's SCRAM exchange is out of order")
