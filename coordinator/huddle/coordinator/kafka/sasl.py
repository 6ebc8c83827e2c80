"""SASL on the Kafka listener: SaslHandshake v1 and SaslAuthenticate v0-2, Kafka's
SASL_SSL and SASL_PLAINTEXT, over the same login as huddle's wire.

The mechanisms, the users, the password checks in turn per address group, the slow-down
after failures and the made-up credential of a user that does not exist are huddle's
login (``huddle.coordinator.handshake.exchange_step``); this module only reads Kafka's
requests and answers them (``KafkaSasl`` is the login's ``SaslReplies``).

Kafka's rules, as its broker keeps them (``SaslServerAuthenticator``):

- until the exchange is complete a connection may send ApiVersions (before its
  SaslHandshake), then one SaslHandshake naming a mechanism, then SaslAuthenticate
  requests; anything else closes the connection, with a line in the log;
- a mechanism not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones,
  and the connection is closed (as after a failed exchange, below);
- a failed exchange is answered SASL_AUTHENTICATION_FAILED with one message whatever was
  wrong (the log says why: an unknown user, a wrong password, a malformed message), and
  the connection is closed, as Kafka closes it, some time after the answer: huddle waits
  for the client to close first, at most ``REFUSED_CLOSE_WAIT_S`` (Kafka waits
  ``connection.failed.authentication.delay.ms``, 100 ms by default). An answer followed
  at once by the close can reach a client in one read, and kafka-python then reports
  only the disconnect;
- a session does not expire: SaslAuthenticate answers a session lifetime of 0, so clients
  never authenticate again on the same connection.

SaslHandshake v0 (the token exchange without Kafka's request header that follows it) is
not served: every listed client (kafka-python, aiokafka, librdkafka, kafkajs, the Java
client since Kafka 1.0) sends v1 when ApiVersions offers it. ApiVersions still lists
SaslHandshake 0-1 (librdkafka turns its SASL handshake on only when v0 is in the range);
a v0 one is answered UNSUPPORTED_VERSION and the connection closed (as after a failed
exchange).
"""

from __future__ import annotations

from typing import Any, Final

from huddle.coordinator import handshake
from huddle.coordinator.connection import Connection
from huddle.coordinator.handshake import SaslHost
from huddle.coordinator.kafka.answers import KafkaCodec, Slot
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.translate import Context, Plan
from huddle.coordinator.security.listener import FAILED_MESSAGE, ListenerSecurity
from huddle.coordinator.security.sasl import SaslSession
from huddle.protocol.errors import ErrorCode

_ILLEGAL: Final = ErrorCode.ILLEGAL_SASL_STATE
REFUSED_CLOSE_WAIT_S: Final = 1.0  # the most a refused connection waits for its client to close


class KafkaSasl:
    """The login of one Kafka listener that requires SASL."""

    def __init__(self, host: SaslHost, security: ListenerSecurity) -> None:
        self.host = host
        self.security = security
        # a SaslAuthenticate being checked, by conn id: its slot, answered by the login
        self._pending: dict[int, tuple[KafkaCodec, Slot]] = {}

    def admits(self, conn: Connection, api_key: int) -> bool:
        """Whether a request may go the usual way before the exchange is complete: an
        ApiVersions before the SaslHandshake."""
        return api_key == Api.API_VERSIONS and conn.sasl is None

    def login(self, conn: Connection, codec: KafkaCodec, slot: Slot, request: Any) -> None:
        """A request of a connection not authenticated yet (but an admitted one)."""
        if slot.api_key == Api.SASL_HANDSHAKE and slot.version == 0:
            code = ErrorCode.UNSUPPORTED_VERSION
            message = "SaslHandshake v0 is not served: use v1 (with SaslAuthenticate)"
            conn.log.warning("handshake_failed", error_code=code.name, error_message=message)
            values = {"error_code": int(code), "mechanisms": list(self.security.mechanisms)}
            _answer(conn, codec, slot, values)
            conn.close(message, after_peer_s=REFUSED_CLOSE_WAIT_S)
        elif slot.api_key == Api.SASL_HANDSHAKE and conn.sasl is None:
            self._handshake(conn, codec, slot, request.mechanism)
        elif slot.api_key == Api.SASL_AUTHENTICATE and isinstance(conn.sasl, SaslSession):
            if conn.conn_id in self._pending:
                message = "a SaslAuthenticate before the last one was answered"
                conn.fail(_ILLEGAL, message, event="kafka_not_authenticated")
                return
            codec.open(slot)
            self._pending[conn.conn_id] = codec, slot
            handshake.exchange_step(self.host, self.security, conn, request.auth_bytes, self)
        else:
            step = "SaslAuthenticate" if conn.sasl is not None else "SaslHandshake"
            conn.fail(
                _ILLEGAL,
                f"{Api(slot.api_key).name} before authentication (expected {step})",
                event="kafka_not_authenticated",
                api_key=slot.api_key,
                correlation_id=slot.correlation_id,
                client_id=conn.client_id,
            )

    def _handshake(self, conn: Connection, codec: KafkaCodec, slot: Slot, mechanism: str) -> None:
        begun = self.security.greet(mechanism)
        enabled = list(self.security.mechanisms)
        if not isinstance(begun, SaslSession):
            code, message = begun if begun is not None else (_ILLEGAL, "no SASL here")
            conn.log.warning(
                "handshake_failed",
                error_code=code.name,
                error_message=message,
                client_id=conn.client_id,
            )
            _answer(conn, codec, slot, {"error_code": int(code), "mechanisms": enabled})
            conn.close(f"{code.name}: {message}", after_peer_s=REFUSED_CLOSE_WAIT_S)
            return
        conn.sasl = begun
        _answer(conn, codec, slot, {"error_code": 0, "mechanisms": enabled})

    # --- the login's SaslReplies ------------------------------------------------------

    close_wait_s = REFUSED_CLOSE_WAIT_S

    def challenge(self, conn: Connection, data: bytes) -> None:
        self._reply(conn, {"error_code": 0, "error_message": None, "auth_bytes": data})

    def authenticated(self, conn: Connection, data: bytes, principal: str) -> None:
        # a session lifetime of 0: the session never expires, nobody authenticates again
        self._reply(conn, {"error_code": 0, "error_message": None, "auth_bytes": data})

    def refused(self, conn: Connection, mechanism: str) -> None:
        code = int(ErrorCode.SASL_AUTHENTICATION_FAILED)
        message = f"{FAILED_MESSAGE} ({mechanism})"
        self._reply(conn, {"error_code": code, "error_message": message, "auth_bytes": b""})

    def _reply(self, conn: Connection, values: dict[str, Any]) -> None:
        pending = self._pending.pop(conn.conn_id, None)
        if pending is None:
            return  # the connection is gone
        codec, slot = pending
        slot.answer = lambda parts: values
        conn.send(codec.release(slot))

    # --- the wire's -------------------------------------------------------------------

    def overdue(self, conn: Connection, timeout_ms: int) -> tuple[ErrorCode, str] | None:
        if handshake.held(self.security, conn):
            return None
        return handshake.timed_out(self.security, conn, timeout_ms)

    def gone(self, conn: Connection) -> None:
        self._pending.pop(conn.conn_id, None)
        self.security.connection_gone(conn.conn_id)  # its place in the queue, if any
        if handshake.in_exchange(conn):
            conn.sasl = None  # a failure answer still to come is not sent


def _answer(conn: Connection, codec: KafkaCodec, slot: Slot, values: dict[str, Any]) -> None:
    codec.open(slot)
    slot.answer = lambda parts: values
    conn.send(codec.release(slot))


# Once authenticated, or on a listener without SASL: Kafka's broker answers both with
# ILLEGAL_SASL_STATE (a session of lifetime 0 is never authenticated again).


def handshake_refused(req: Any, version: int, ctx: Context) -> Plan:
    values = {"error_code": int(_ILLEGAL), "mechanisms": []}
    return Plan([], lambda parts: values)


def authenticate_refused(req: Any, version: int, ctx: Context) -> Plan:
    message = "no SASL exchange is under way on this connection"
    values = {"error_code": int(_ILLEGAL), "error_message": message, "auth_bytes": b""}
    return Plan([], lambda parts: values)
