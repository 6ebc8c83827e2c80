"""When to heartbeat, and when a member must assume it has been dropped: one small object
that is given the time (milliseconds, monotonic, as the member core) rather than reading a
clock; and ``Liveness``, the rules of what proves a session, a part the driver is given."""

from __future__ import annotations

from huddle.protocol.errors import InvalidArgumentError


class HeartbeatTimer:
    """Zombie safety rests on ``last_ok_sent``: the coordinator renews a session when it
    *receives* a request, which is after the member sent it. A member that has had no
    request answered in order for a whole session timeout, counted from when it sent the
    last one, has therefore been expired (or is about to be) and must treat its partitions
    as lost before the coordinator can hand them to anyone else.

    A rebalance bounds membership too: a member that has not rejoined when the join phase
    ends (its rebalance timeout after it began) is dropped, however well it heartbeats, as
    answers of REBALANCE_IN_PROGRESS prove it is a member only until then. The phase began
    after the group was last seen steady (``last_steady_sent``: a request sent then found no
    rebalance under way), so the member is safe until that plus its rebalance timeout, or
    until its JoinGroup is answered, which makes it steady again."""

    __slots__ = (
        "interval_ms",
        "last_ok_sent",
        "last_sent",
        "last_steady_sent",
        "rebalance_ms",
        "session_ms",
    )

    def __init__(
        self,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        rebalance_timeout_ms: int | None = None,
    ) -> None:
        if heartbeat_interval_ms <= 0 or heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidArgumentError(
                f"heartbeat interval ({heartbeat_interval_ms} ms) must be positive and below "
                f"the session timeout ({session_timeout_ms} ms)"
            )
        self.session_ms: float = session_timeout_ms
        self.interval_ms: float = heartbeat_interval_ms
        self.last_sent = float("-inf")
        self.last_ok_sent: float | None = None  # None: no session to protect
        self.rebalance_ms: float | None = rebalance_timeout_ms
        self.last_steady_sent: float | None = None

    def sent(self, now: float) -> None:
        """A heartbeat went out at ``now`` (``-inf``: the next one is due at once)."""
        self.last_sent = now

    def answered(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` was answered in a way that proves membership."""
        if self.last_ok_sent is None or sent_at > self.last_ok_sent:
            self.last_ok_sent = sent_at

    def steady(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` found the group with no rebalance under way (a
        heartbeat answered NONE, a join or sync completed): it also proves membership."""
        self.answered(sent_at)
        if self.last_steady_sent is None or sent_at > self.last_steady_sent:
            self.last_steady_sent = sent_at

    def reset(self) -> None:
        """No membership to protect (not joined, or it was lost)."""
        self.last_ok_sent = None
        self.last_steady_sent = None

    def shorten(self, deadline: float) -> None:
        """The session may end sooner than the timeout says (e.g. a closed connection)."""
        if self.last_ok_sent is not None and deadline < self.last_ok_sent + self.session_ms:
            self.last_ok_sent = deadline - self.session_ms

    def next_heartbeat(self) -> float:
        return self.last_sent + self.interval_ms

    def session_deadline(self) -> float | None:
        """When the coordinator may have dropped this member, if it holds a session: its
        session's end, or the end of a join phase that may have begun since it was last
        seen steady, whichever is sooner."""
        if self.last_ok_sent is None:
            return None
        deadline = self.last_ok_sent + self.session_ms
        steady, rebalance = self.last_steady_sent, self.rebalance_ms
        if steady is not None and rebalance is not None:
            return min(deadline, steady + rebalance)
        return deadline

    def expired(self, now: float) -> bool:
        deadline = self.session_deadline()
        return deadline is not None and now >= deadline


class Liveness:
    """How the driver proves a member alive: the correct rules, a part the driver is given
    (the simulator gives faulty ones to prove it finds what they break)."""

    __slots__ = ()

    def session_proof(self, sent_at: float, received_at: float) -> float:
        """When an answered heartbeat proves the session from: when it was *sent* (the
        coordinator renewed the session on receipt, which is later), never its answer's
        arrival."""
        return sent_at

    def paused_in_callbacks(self) -> bool:
        """Whether heartbeats stop while listener callbacks run: never (a long callback
        must not cost the member its session; the rebalance timeout bounds it)."""
        return False


LIVENESS = Liveness()
