"""The deadlines of consumer-protocol members, as keys of the core's ``TimerQueue``.

- ``SessionEnds``: no heartbeat for a session timeout. Every heartbeat moves it out; when it
  passes, the member is fenced (taken out, its partitions free).
- ``RevocationDue``: a member asked to revoke partitions (``UNREVOKED_PARTITIONS``) has its
  own rebalance timeout to do so; if it is still at that epoch when it passes, it is fenced.
- ``ClassicRejoinDue``: a classic member (``consumer.classic``) told to rejoin (its
  Heartbeat answered REBALANCE_IN_PROGRESS) has its rebalance timeout to send its JoinGroup,
  and one whose JoinGroup was answered the same to send its SyncGroup (Kafka's classic join
  and sync timeouts); if it has not, it is fenced (counted as a revocation's).
- ``AssignorRecheck``: an assignor asked to be run again (a held partition's deadline): the
  group epoch moves then, and the next heartbeat works out a new target.
"""

from __future__ import annotations

from typing import Literal, NamedTuple


class SessionEnds(NamedTuple):
    group_id: str
    member_id: str
    kind: Literal["session"] = "session"


class RevocationDue(NamedTuple):
    group_id: str
    member_id: str
    epoch: int
    kind: Literal["revocation"] = "revocation"


class ClassicRejoinDue(NamedTuple):
    group_id: str
    member_id: str
    kind: Literal["classic"] = "classic"


class AssignorRecheck(NamedTuple):
    group_id: str
    kind: Literal["recheck"] = "recheck"


Deadline = SessionEnds | RevocationDue | ClassicRejoinDue | AssignorRecheck


class Fenced(NamedTuple):
    """A member the coordinator took out on its own: why, and at which epoch."""

    group_id: str
    member_id: str
    epoch: int
    reason: Literal["session", "revocation"]
