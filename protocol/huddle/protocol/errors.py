"""Error codes with Kafka's numbers and names, and the exception family built on them.

One registry: every code maps to one exception class that knows whether the condition is
retriable. Both sides use it; the client's reaction to each code is written once, against
these classes, not per request.
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
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    KAFKA_STORAGE_ERROR = 56
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82


class HuddleError(Exception):
    """Base of every error that carries an ErrorCode."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.code.name.lower().replace("_", " ")
        super().__init__(f"{self.code.name} ({int(self.code)}): {self.message}")

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.code] = cls


_REGISTRY: dict[ErrorCode, type[HuddleError]] = {}


class UnknownServerError(HuddleError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class CorruptMessageError(HuddleError):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(HuddleError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class MessageTooLargeError(HuddleError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetMetadataTooLargeError(HuddleError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


class CoordinatorLoadInProgressError(HuddleError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(HuddleError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(HuddleError):
    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class InvalidTopicError(HuddleError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class IllegalGenerationError(HuddleError):
    code = ErrorCode.ILLEGAL_GENERATION


class InconsistentGroupProtocolError(HuddleError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class InvalidGroupIdError(HuddleError):
    code = ErrorCode.INVALID_GROUP_ID


class UnknownMemberIdError(HuddleError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class InvalidSessionTimeoutError(HuddleError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


class RebalanceInProgressError(HuddleError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


class UnsupportedVersionError(HuddleError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(HuddleError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(HuddleError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidRequestError(HuddleError):
    code = ErrorCode.INVALID_REQUEST


class PolicyViolationError(HuddleError):
    code = ErrorCode.POLICY_VIOLATION


class KafkaStorageError(HuddleError):
    """The coordinator could not write a change to its data directory; try again."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class GroupIdNotFoundError(HuddleError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class MemberIdRequiredError(HuddleError):
    code = ErrorCode.MEMBER_ID_REQUIRED


class GroupMaxSizeReachedError(HuddleError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(HuddleError):
    code = ErrorCode.FENCED_INSTANCE_ID


assert set(_REGISTRY) == set(ErrorCode) - {ErrorCode.NONE}, "every code needs an exception class"


def error_class(code: ErrorCode | int) -> type[HuddleError]:
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
    raise cls(message)
