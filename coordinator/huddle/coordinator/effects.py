"""What one call into the core produces: frames to send, in order, at a given time."""

from __future__ import annotations

from dataclasses import dataclass

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


class Effects:
    __slots__ = ("now", "out")

    def __init__(self, now: float) -> None:
        self.now = now
        self.out: list[Outgoing] = []

    def reply(self, waiter: Waiter, response: Response) -> None:
        self.out.append((waiter[0], Reply(correlation_id=waiter[1], response=response)))

    def notify(self, conn_id: int, notice: Notice) -> None:
        self.out.append((conn_id, notice))
