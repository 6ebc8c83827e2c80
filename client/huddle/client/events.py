"""What the member runtime raises, and the events its tasks hand to its main loop."""

from __future__ import annotations

from dataclasses import dataclass

from huddle.protocol.errors import ErrorCode


class MemberFailedError(RuntimeError):
    """The member hit a fatal error (e.g. FENCED_INSTANCE_ID) and stopped."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code


class CommitFailedError(RuntimeError):
    """A commit was refused because the member is no longer in the generation it used."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"commit refused: {code.name}: {message}")
        self.code = code


class Reconnect(Exception):
    """Drop this connection and find the coordinator again."""


# Events for the main loop, from the other tasks.
@dataclass(frozen=True, slots=True)
class Rejoin:
    reason: str


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    code: ErrorCode
    generation: int


@dataclass(frozen=True, slots=True)
class RebalanceNotice:
    generation: int


@dataclass(frozen=True, slots=True)
class FellOut:
    code: ErrorCode
    message: str
    generation: int


@dataclass(frozen=True, slots=True)
class SessionExpired:
    pass


Event = Rejoin | HeartbeatAnswer | RebalanceNotice | FellOut | SessionExpired
