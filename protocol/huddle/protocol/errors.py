"""Error codes with Kafka's numbers and names, and the exception family built on them.

Every exception huddle raises on purpose is a ``HuddleError``. Below it:

* ``ServerError``: the coordinator answered with an error code. One registry maps every code
  to one subclass that knows its ``code`` and whether the condition is ``retriable``; a code
  this side does not know becomes ``UnknownServerError`` carrying the number it got
  (``error_code``). Both sides use the registry; the client's reaction to each code is
  written once, against these classes, not per request.
* ``ClientError``: something went wrong on this side: the connection closed, a request timed
  out (``huddle.client`` defines those).
* ``InvalidArgumentError`` (also a ``ValueError``; ``InvalidArgumentTypeError`` is also a
  ``TypeError``): an argument huddle was given is not valid, said when it is given.
  ``UsageError`` (also a ``RuntimeError``): an object used in a way it does not support.

Codes travel on the wire as plain integers, so a newer peer's code never fails decoding;
``ErrorCode.of`` turns one into an ``ErrorCode`` at the edge.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128

    @classmethod
    def of(cls, number: int) -> ErrorCode | None:
        """The code with this number, or None for a number this side does not know."""
        try:
            return cls(number)
        except ValueError:
            return None


def to_code(number: int) -> ErrorCode:
    """``ErrorCode`` at the edge; a number not known here is UNKNOWN_SERVER_ERROR."""
    code = ErrorCode.of(number)
    return code if code is not None else ErrorCode.UNKNOWN_SERVER_ERROR


def error_name(number: int) -> str:
    """``"REBALANCE_IN_PROGRESS"`` for 27; ``"UNKNOWN_CODE_87"`` for a number not known here."""
    code = ErrorCode.of(number)
    return code.name if code is not None else f"UNKNOWN_CODE_{number}"


class HuddleError(Exception):
    """The root of every exception huddle raises on purpose. Each one survives ``pickle``
    and ``copy`` (to another process, say) with its type, message and attributes."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        # Made again from its args and attributes, not by calling __init__ with its args
        # (the default): a subclass's __init__ takes other arguments than the args it
        # leaves, and one (ServerError) formats its message from them.
        fields = {}
        if isinstance(self, OSError):  # kept by OSError itself, not in __dict__; one set
            # to None is not the same as one never set (str() shows it)
            fields = {name: getattr(self, name) for name in _OS_FIELDS}
            fields = {name: value for name, value in fields.items() if value is not None}
        return (_rebuilt, (type(self), self.args, dict(vars(self)), fields))


_OS_FIELDS = ("errno", "strerror", "filename", "filename2")


def _rebuilt(
    cls: type[HuddleError],
    args: tuple[object, ...],
    attributes: dict[str, object],
    fields: dict[str, object],
) -> HuddleError:
    """A ``HuddleError`` as ``__reduce__`` took it apart."""
    error = cls.__new__(cls, *args)
    error.args = args
    vars(error).update(attributes)
    for name, value in fields.items():
        setattr(error, name, value)
    return error


class ClientError(HuddleError):
    """Something went wrong on this side (connection closed, timed out), not an answer."""


class InvalidArgumentError(HuddleError, ValueError):
    """An argument is not valid (a group id too long, a malformed address, settings that do
    not fit together): raised where it is given. Also a ``ValueError``, as Python's own."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument is not of a kind huddle takes (one string where a list of topic names is
    expected, a listener without a required callback). Also a ``TypeError``."""


class UsageError(HuddleError, RuntimeError):
    """An object was used in a way it does not support (a ``Member`` entered twice, an
    ``Admin`` used outside its ``async with``). Also a ``RuntimeError``."""


class AuthenticationError(HuddleError):
    """Who the client is could not be established (bad credentials, a mechanism or a
    certificate the coordinator does not take). Not retriable: the configuration is wrong."""


class AuthorizationError(HuddleError):
    """The client is known, but its principal may not do what it asked (Kafka's ACLs)."""


class ServerError(HuddleError):
    """The coordinator answered with an error code; one subclass per code (the registry)."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False

    def __init__(self, message: str | None = None, *, error_code: int | None = None) -> None:
        # the number as received: differs from ``code`` only for UnknownServerError
        self.error_code = int(self.code) if error_code is None else error_code
        text = message or self.code.name.lower().replace("_", " ")
        HuddleError.__init__(self, text)
        self.args = (f"{error_name(self.error_code)} ({self.error_code}): {text}",)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.code] = cls


_REGISTRY: dict[ErrorCode, type[ServerError]] = {}


class UnknownServerError(ServerError):
    """An unexpected server error, or a code this side does not know (see ``error_code``)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class CorruptMessageError(ServerError):
    code = ErrorCode.CORRUPT_MESSAGE
    retriable = True  # as Kafka's CorruptRecordException: sending it again may work


class UnknownTopicOrPartitionError(ServerError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True  # as in Kafka: the topic may be being created


class MessageTooLargeError(ServerError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetMetadataTooLargeError(ServerError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class CoordinatorLoadInProgressError(ServerError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(ServerError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(ServerError):
    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class InvalidTopicError(ServerError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class IllegalGenerationError(ServerError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(ServerError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(ServerError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(ServerError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(ServerError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(ServerError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class TopicAuthorizationFailedError(ServerError, AuthorizationError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailedError(ServerError, AuthorizationError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailedError(ServerError, AuthorizationError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class UnsupportedSaslMechanismError(ServerError, AuthenticationError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(ServerError, AuthenticationError):
    code = ErrorCode.ILLEGAL_SASL_STATE


class SaslAuthenticationFailedError(ServerError, AuthenticationError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class UnsupportedVersionError(ServerError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(ServerError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(ServerError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidRequestError(ServerError):
    code = ErrorCode.INVALID_REQUEST


class PolicyViolationError(ServerError):
    code = ErrorCode.POLICY_VIOLATION


class KafkaStorageError(ServerError):
    """The coordinator could not write a change to its data directory; try again."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class NonEmptyGroupError(ServerError):
    """A group with members cannot be deleted (Kafka's DeleteGroups)."""

    code = ErrorCode.NON_EMPTY_GROUP


class GroupIdNotFoundError(ServerError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class MemberIdRequiredError(ServerError):
    code = ErrorCode.MEMBER_ID_REQUIRED


class GroupMaxSizeReachedError(ServerError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(ServerError):
    code = ErrorCode.FENCED_INSTANCE_ID


class FencedMemberEpochError(ServerError):
    code = ErrorCode.FENCED_MEMBER_EPOCH


class UnreleasedInstanceIdError(ServerError):
    code = ErrorCode.UNRELEASED_INSTANCE_ID


class UnsupportedAssignorError(ServerError):
    code = ErrorCode.UNSUPPORTED_ASSIGNOR


class StaleMemberEpochError(ServerError):
    """An offset commit made at a member epoch that is not the member's (KIP-848)."""

    code = ErrorCode.STALE_MEMBER_EPOCH


class InvalidRegularExpressionError(ServerError):
    code = ErrorCode.INVALID_REGULAR_EXPRESSION


assert set(_REGISTRY) == set(ErrorCode) - {ErrorCode.NONE}, "every code needs an exception class"


def error_class(code: ErrorCode | int) -> type[ServerError]:
    """The exception class for a code; unknown numbers map to UnknownServerError."""
    try:
        return _REGISTRY[ErrorCode(code)]
    except (ValueError, KeyError):
        return UnknownServerError


def raise_for(code: ErrorCode | int, message: str | None = None) -> None:
    """Raise the registered exception for a non-NONE code; return quietly for NONE."""
    if code == ErrorCode.NONE:
        return
    cls = error_class(code)
    if cls is UnknownServerError and code != ErrorCode.UNKNOWN_SERVER_ERROR:
        message = f"unknown error code {int(code)}" + (f": {message}" if message else "")
    raise cls(message, error_code=int(code))
