"""What the member runtime raises, and the events its tasks hand to its main loop."""

from __future__ import annotations

from dataclasses import dataclass

from huddle.client.generation import Generation
from huddle.protocol.errors import ClientError, ErrorCode, HuddleError, ServerError


class MemberFailedError(HuddleError, RuntimeError):
    """The member stopped: the coordinator answered an error no retry mends (``code``, e.g.
    FENCED_INSTANCE_ID answering a heartbeat, GROUP_AUTHORIZATION_FAILED finding the
    coordinator, SASL_AUTHENTICATION_FAILED; when the refusal was raised as a
    ``ServerError``, that is ``__cause__``), or something failed on this side: the
    application's listener or assignor raised, or the TLS handshake was refused (``code`` is
    None and the exception is ``__cause__``)."""

    def __init__(self, code: ErrorCode | None, message: str) -> None:
        named = f"{code.name}: {message}" if code is not None and message else message
        super().__init__(named or (code.name if code is not None else ""))
        self.code = code


class CommitFailedError(HuddleError, RuntimeError):
    """A commit was refused because the member is no longer in the generation it used."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"commit refused: {code.name}: {message}")
        self.code = code


class NotConnectedError(ClientError):
    """The member has no connection to the coordinator right now (it is reconnecting)."""


class StableTimeoutError(ClientError, TimeoutError):
    """``Member.wait_stable()`` ran out of time; the message says what the member was
    doing (its state, generation, partitions, connection). Also a ``TimeoutError``."""


class ReconnectError(HuddleError):
    """Drop this connection and find the coordinator again."""


class RefusedError(HuddleError):
    """The coordinator refused this member itself as it connected (its authentication, or
    its authorization to find the group's coordinator): the ``ServerError`` is
    ``__cause__``, and its code goes on the ``MemberFailedError``."""


class ListenerFailedError(HuddleError):
    """The application's listener raised (``__cause__``): the member stops with
    ``MemberFailedError``, ``code`` None, whatever it raised (a commit's NotCoordinatorError
    or timeout let out of a callback is neither a refusal of the member nor a lost
    connection)."""


# Events for the main loop, from the other tasks.
@dataclass(frozen=True, slots=True)
class Rejoin:
    reason: str


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    code: ErrorCode
    generation: Generation  # the one the heartbeat was sent in


@dataclass(frozen=True, slots=True)
class RebalanceNotice:
    generation: int  # the number of the generation the group left


@dataclass(frozen=True, slots=True)
class FellOut:
    code: ErrorCode
    message: str
    generation: Generation  # the one the commit was made in


@dataclass(frozen=True, slots=True)
class SessionExpired:
    generation: Generation  # the one whose session ran out (a later one was proven anew)


Event = Rejoin | HeartbeatAnswer | RebalanceNotice | FellOut | SessionExpired


def failure_of(exc: BaseException) -> MemberFailedError:
    """What a member stops with when ``exc`` (maybe inside exception groups) ends its main
    loop, ``exc``'s cause chained: a coordinator's refusal as the member connected
    (``RefusedError`` of a ``ServerError``) carries its code; anything else (the application's
    listener or assignor raised, a bug) does not."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    wrapped = exc.__cause__ if isinstance(exc, RefusedError | ListenerFailedError) else None
    cause = wrapped or exc
    if isinstance(exc, RefusedError) and isinstance(cause, ServerError):
        failure = MemberFailedError(cause.code, cause.message)
    else:
        failure = MemberFailedError(None, f"{type(cause).__name__}: {cause}")
    failure.__cause__ = cause
    return failure
