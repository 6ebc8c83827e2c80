"""When load-balancing revocations happen: Design III pacing and the revocation back-off.

Pacing: at most ``max_moves`` partitions are revoked for balance in one round; when more
remain and ``pause_ms`` is positive, the next batch waits that long (the group is told to
come back then). With no pause the follow-up round (the revoking members rejoin at once)
revokes the next batch.

Back-off: a revoking round caused by a membership change that comes after another
revoking round (with no quiet round between) does not revoke at once: it waits
``initial``, then twice that, and so on up to ``cap``, and the group comes back then. A
round with the same members as the one before and nothing to move is quiet: it resets
the back-off. (A member flapping in and out makes only changed-membership rounds, so it
keeps backing off; the follow-up of an ordinary scale-up is quiet.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest


@dataclass(slots=True)
class Decision:
    moves: int
    """how many of the wanted moves to revoke now."""
    come_back_at: float | None
    """when the group should rebalance again for the moves (None: no need)."""


@dataclass(slots=True)
class Pacer:
    max_moves: int | None
    pause_ms: int
    backoff_initial_ms: int
    backoff_max_ms: int
    streak: int = 0
    """revoking rounds since the last quiet round."""
    backoff_until: float | None = None
    next_batch_at: float | None = None

    def decide(self, wanted: int, now: float, *, membership_changed: bool) -> Decision:
        if wanted == 0:
            self.backoff_until = self.next_batch_at = None
            if not membership_changed:
                self.streak = 0
            return Decision(0, None)
        gates = [g for g in (self.backoff_until, self.next_batch_at) if g is not None and now < g]
        if gates:
            return Decision(0, max(gates))
        waited = self.backoff_until is not None
        self.backoff_until = self.next_batch_at = None
        if not waited and self.streak > 0 and membership_changed:
            wait = self.backoff_ms()
            if wait > 0:
                self.backoff_until = now + wait
                return Decision(0, self.backoff_until)
        moves = wanted if self.max_moves is None else min(wanted, self.max_moves)
        self.streak += 1
        if moves < wanted and self.pause_ms > 0:
            self.next_batch_at = now + self.pause_ms
        return Decision(moves, self.next_batch_at)

    def backoff_ms(self) -> int:
        """The wait before the next revoking round: initial, doubling per revoking round."""
        wait = self.backoff_initial_ms
        for _ in range(self.streak - 1):
            if wait >= self.backoff_max_ms:
                break
            wait *= 2
        return min(wait, self.backoff_max_ms)


def pick(moves: Sequence[Sequence[int]], loads: Sequence[int], count: int) -> set[int]:
    """``count`` of the wanted moves: one from each giver in turn, heaviest giver first."""
    givers = sorted((m for m in range(len(moves)) if moves[m]), key=lambda m: (-loads[m], m))
    chosen: list[int] = []
    for layer in zip_longest(*(moves[m] for m in givers)):
        chosen.extend(pid for pid in layer if pid is not None)
        if len(chosen) >= count:
            break
    return set(chosen[:count])
