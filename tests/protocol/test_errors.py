"""protocol.errors: one exception class per code, retriable flags, raise_for."""

from __future__ import annotations

import pytest

from huddle.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    HuddleError,
    NotCoordinatorError,
    RebalanceInProgressError,
    TopicAlreadyExistsError,
    UnknownServerError,
    error_class,
    raise_for,
)


@pytest.mark.parametrize("code", [c for c in ErrorCode if c != ErrorCode.NONE])
def test_every_code_has_its_class(code: ErrorCode) -> None:
    cls = error_class(code)
    assert issubclass(cls, HuddleError)
    assert cls.code == code
    assert error_class(int(code)) is cls


def test_classes_are_distinct() -> None:
    codes = [c for c in ErrorCode if c != ErrorCode.NONE]
    assert len({error_class(c) for c in codes}) == len(codes)


def test_retriable_codes() -> None:
    retriable = {c for c in ErrorCode if c != ErrorCode.NONE and error_class(c).retriable}
    assert retriable == {  # as Kafka's RetriableException subclasses
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.KAFKA_STORAGE_ERROR,  # a write to the data dir failed: try again
    }
    assert {int(c) for c in retriable} == {2, 3, 14, 15, 16, 56}
    assert CoordinatorLoadInProgressError.retriable
    assert CoordinatorNotAvailableError.retriable
    assert NotCoordinatorError.retriable
    assert not RebalanceInProgressError.retriable


def test_kafka_numbers() -> None:
    assert int(ErrorCode.REBALANCE_IN_PROGRESS) == 27
    assert int(ErrorCode.UNKNOWN_MEMBER_ID) == 25
    assert int(ErrorCode.ILLEGAL_GENERATION) == 22
    assert int(ErrorCode.MEMBER_ID_REQUIRED) == 79
    assert int(ErrorCode.FENCED_INSTANCE_ID) == 82


def test_raise_for_none_is_quiet() -> None:
    raise_for(ErrorCode.NONE, "ignored")
    raise_for(0)


def test_raise_for_raises_the_registered_class_with_the_message() -> None:
    with pytest.raises(TopicAlreadyExistsError) as caught:
        raise_for(ErrorCode.TOPIC_ALREADY_EXISTS, 'topic "orders" already exists')
    assert caught.value.message == 'topic "orders" already exists'
    assert str(caught.value) == 'TOPIC_ALREADY_EXISTS (36): topic "orders" already exists'


def test_raise_for_an_unknown_number() -> None:
    with pytest.raises(UnknownServerError, match="unknown error code 999: odd"):
        raise_for(999, "odd")
    assert error_class(999) is UnknownServerError


def test_default_message_is_the_code_name() -> None:
    assert RebalanceInProgressError().message == "rebalance in progress"
