"""What one call into the core produces: frames to send, in order, at a given time."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from huddle.protocol.messages import Notice, Reply, Response, ServerFrame

Outgoing = tuple[int, ServerFrame]  # (conn_id, frame)
Waiter = tuple[int, int]  # (conn_id, correlation_id) of a request to answer


@dataclass(frozen=True, slots=True)
class Peer:
    """A client connection as the core knows it."""

    conn_id: int
    client_id: str = ""
    host: str = ""
    # Who the client authenticated as (Kafka's principal): SASL's user, a client
    # certificate's subject, or ANONYMOUS.
    principal: str = "User:ANONYMOUS"
    # ``incarnation_digest`` of the token its handshake presented (None: it sent none): a
    # member moves to this connection only if it joined with the same (never the token)
    incarnation: bytes | None = field(default=None, repr=False)


def incarnation_digest(token: bytes | None) -> bytes | None:
    """What the coordinator keeps of a client's incarnation token: its SHA-256, so that
    nothing it holds, logs or writes to a data dir can be presented as the token."""
    return None if token is None else hashlib.sha256(token).digest()


class Effects:
    __slots__ = ("now", "out")

    def __init__(self, now: float) -> None:
        self.now = now
        self.out: list[Outgoing] = []

    def reply(self, waiter: Waiter, response: Response) -> None:
        self.out.append((waiter[0], Reply(correlation_id=waiter[1], response=response)))

    def notify(self, conn_id: int, notice: Notice) -> None:
        self.out.append((conn_id, notice))
