"""Small values of the coordinator core: why a request is refused, and what a deadline is for.

``Refusal`` replaces ``(ErrorCode, message)`` tuples: a rule returns the thing it found or a
``Refusal``, and the caller answers with its code and message.

The deadline keys of the core's ``TimerQueue`` name what happens when they pass; the core
dispatches on them with ``match``. They are NamedTuples so that hashing them (every
heartbeat moves a session deadline) costs what hashing a tuple costs; the ``kind`` field keeps
two kinds with the same ids apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from huddle.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not carried out: the error code it is answered with, and why."""

    code: ErrorCode
    message: str


class JoinPhaseEnds(NamedTuple):
    """The group's join phase is over (or its initial delay ran out)."""

    group_id: str
    kind: Literal["join"] = "join"


class SyncPhaseEnds(NamedTuple):
    """Members that have not sent SyncGroup by now are removed."""

    group_id: str
    kind: Literal["sync"] = "sync"


class SessionExpires(NamedTuple):
    group_id: str
    member_id: str
    kind: Literal["session"] = "session"


class PendingMemberExpires(NamedTuple):
    """A member given an id (KIP-394) that has not joined again with it."""

    group_id: str
    member_id: str
    kind: Literal["pending"] = "pending"


class DisconnectGraceEnds(NamedTuple):
    """A dynamic member's connection closed this long ago and it has not come back."""

    group_id: str
    member_id: str
    kind: Literal["grace"] = "grace"


class RestartFenceEnds(NamedTuple):
    """A restart fence is over (``Sessions.fence``): no group's; the group id is empty."""

    group_id: str = ""
    kind: Literal["fence"] = "fence"


Deadline = (
    JoinPhaseEnds
    | SyncPhaseEnds
    | SessionExpires
    | PendingMemberExpires
    | DisconnectGraceEnds
    | RestartFenceEnds
)
