"""A node's lease, judged by the node's own clock (sans-IO).

etcd lets a lease expire ``ttl`` after the last keep-alive it *received*; the node only
knows when it *sent* one. So the node counts from the send of its last answered keep-alive:
etcd cannot expire the lease before ``sent + ttl``, and the node stops serving every shard a
safety margin before that (``sent + ttl - margin``). A node that is frozen, partitioned or
slow to hear back therefore fences itself before any other node can take its shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from huddle.protocol.errors import InvalidArgumentError

MAX_CLOCK_RATE_ERROR = 1e-3  # the node's clock may run this much fast against etcd's


@dataclass
class LeaseGuard:
    ttl_ms: float
    margin_ms: float
    proof_sent_at: float | None = None  # the send time of the last answered keep-alive
    lost: bool = False  # etcd said it expired: only a new lease serves again

    def __post_init__(self) -> None:
        if not 0 <= self.margin_ms < self.ttl_ms:
            raise InvalidArgumentError(
                f"the safety margin ({self.margin_ms} ms) must be under the lease TTL "
                f"({self.ttl_ms} ms)"
            )

    def answered(self, sent_at: float, ttl_left_s: int) -> None:
        """A grant or keep-alive sent at ``sent_at`` was answered with ``ttl_left_s``."""
        if ttl_left_s <= 0:
            self.lost = True
            return
        if self.proof_sent_at is None or sent_at > self.proof_sent_at:
            self.proof_sent_at = sent_at

    @property
    def deadline(self) -> float | None:
        """When the node must have stopped serving (its own clock), if it has a proof."""
        if self.proof_sent_at is None or self.lost:
            return None
        span = (self.ttl_ms - self.margin_ms) * (1 - MAX_CLOCK_RATE_ERROR)
        return self.proof_sent_at + span

    def serving(self, now: float) -> bool:
        deadline = self.deadline
        return deadline is not None and now < deadline

    def next_refresh(self, now: float) -> float:
        """When to send the next keep-alive: a third of the TTL after the last proof."""
        if self.proof_sent_at is None:
            return now
        return max(now, self.proof_sent_at + self.ttl_ms / 3)
