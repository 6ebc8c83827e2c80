"""Every bad argument to the client library's public constructors is a ``HuddleError``, said
where it is given (issue 24, item 21): an ``InvalidArgumentError`` that is also a
``ValueError`` (of the wrong kind: an ``InvalidArgumentTypeError``, also a ``TypeError``).
Misuse is a ``UsageError``, also a ``RuntimeError``."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import pytest

from huddle.client import Admin, HuddleError, Member
from huddle.client.assignors.base import ASSIGNORS
from huddle.client.assignors.deferred import DeferredAssignor
from huddle.client.assignors.high_availability import HighAvailabilityAssignor
from huddle.client.connection import connect
from huddle.client.security import Security, security_from_env
from huddle.protocol.errors import InvalidArgumentError, InvalidArgumentTypeError, UsageError

LONG = "x" * 300


def member(**changes: Any) -> Member:
    settings: dict[str, Any] = {"group_id": "g", "topics": ["t"], **changes}
    bootstrap = settings.pop("bootstrap", "127.0.0.1:9292")
    return Member(bootstrap, **settings)


MEMBER = {
    "an empty group id": {"group_id": ""},
    "a group id over 255 characters": {"group_id": LONG},
    "a group id not a str": {"group_id": 7},
    "an empty instance id": {"instance_id": ""},
    "an instance id over 249 characters": {"instance_id": LONG},
    "an instance id not a str": {"instance_id": 7},
    "a client id over 255 characters": {"client_id": LONG},
    "a client id not a str": {"client_id": None},
    "one topic as a str": {"topics": "orders"},
    "topics not a list": {"topics": 7},
    "an empty topic name": {"topics": [""]},
    "a topic name not a str": {"topics": [7]},
    "neither topics nor a pattern": {"topics": None},
    "both topics and a pattern": {"pattern": "orders-.*"},
    "a pattern that is no regular expression": {"topics": None, "pattern": "("},
    "a pattern of the wrong kind": {"topics": None, "pattern": 7},
    "no assignor": {"assignors": []},
    "an unknown assignor": {"assignors": ["fastest"]},
    "one assignor name as a str": {"assignors": "range"},
    "an assignor of the wrong kind": {"assignors": [7]},
    "an assignor twice": {"assignors": ["range", "range"]},
    "assignors with no protocol in common": {"assignors": ["range", "cooperative-deferred"]},
    "a session timeout of 0": {"session_timeout_ms": 0},
    "a negative session timeout": {"session_timeout_ms": -1},
    "a session timeout as a str": {"session_timeout_ms": "10000"},
    "a heartbeat interval of 0": {"heartbeat_interval_ms": 0},
    "a heartbeat interval over the session timeout": {"heartbeat_interval_ms": 20_000},
    "a rebalance timeout of 0": {"rebalance_timeout_ms": 0},
    "a negative retry backoff": {"retry_backoff_ms": -1},
    "a negative largest backoff": {"max_retry_backoff_ms": -5},
    "a bootstrap address without a port": {"bootstrap": "localhost"},
    "a bootstrap port out of range": {"bootstrap": "localhost:99999"},
    "no bootstrap address": {"bootstrap": " , "},
    "lags that cannot be called": {"lags": {}},
    "security of the wrong kind": {"security": "tls"},
    "a listener without callbacks": {"listener": object()},
}


@pytest.mark.parametrize("changes", MEMBER.values(), ids=MEMBER.keys())
def test_member_refuses_a_bad_argument_with_a_huddle_error(changes: dict[str, Any]) -> None:
    with pytest.raises(HuddleError) as refused:
        member(**changes)
    assert isinstance(refused.value, InvalidArgumentError)
    assert isinstance(refused.value, ValueError)
    assert str(refused.value)  # says what is wrong


OTHERS: dict[str, Callable[[], object]] = {
    "Admin: a malformed bootstrap list": lambda: Admin("localhost"),
    "Admin: a timeout of 0": lambda: Admin(timeout=0),
    "Admin: security of the wrong kind": lambda: Admin(security=7),  # type: ignore[arg-type]
    "Security: a username without a password": lambda: Security(username="alice"),
    "Security: an unknown mechanism": lambda: Security(username="a", password="p", mechanism="MD5"),
    "Security: an SSL context and files": lambda: Security(
        ssl_context=ssl.create_default_context(), ca_file="ca.pem"
    ),
    "Security: a key without its certificate": lambda: Security(key_file="key.pem"),
    "Security: a password file that cannot be read": lambda: security_from_env(
        {"HUDDLE_USERNAME": "a", "HUDDLE_PASSWORD_FILE": "/nonexistent/password"}
    ),
    "an unknown assignor name": lambda: ASSIGNORS.create("fastest"),
    "high-availability: a negative recovery lag": lambda: HighAvailabilityAssignor(
        acceptable_recovery_lag=-1
    ),
    "high-availability: negative standbys": lambda: HighAvailabilityAssignor(
        num_standby_replicas=-1
    ),
    "high-availability: no warm-ups": lambda: HighAvailabilityAssignor(max_warmup_replicas=0),
    "high-availability: probing every 0 ms": lambda: HighAvailabilityAssignor(
        probing_rebalance_interval_ms=0
    ),
    "high-availability: a balance factor of 0": lambda: HighAvailabilityAssignor(balance_factor=0),
    "cooperative-deferred: no moves per round": lambda: DeferredAssignor(max_moves_per_round=0),
    "cooperative-deferred: a negative delay": lambda: DeferredAssignor(
        scheduled_rebalance_max_delay_ms=-1
    ),
    "cooperative-deferred: a negative pause": lambda: DeferredAssignor(move_pause_ms=-1),
}


@pytest.mark.parametrize("make", OTHERS.values(), ids=OTHERS.keys())
def test_other_constructors_refuse_a_bad_argument_with_a_huddle_error(
    make: Callable[[], object],
) -> None:
    with pytest.raises(HuddleError) as refused:
        make()
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    "changes",
    [
        {"bootstrap": "localhost"},
        {"timeout": 0},
        {"max_frame_bytes": 0},
        {"security": "tls"},
    ],
    ids=["malformed address", "timeout of 0", "frames of 0 bytes", "security of the wrong kind"],
)
async def test_connect_refuses_a_bad_argument_before_it_connects(changes: dict[str, Any]) -> None:
    bootstrap = changes.pop("bootstrap", "127.0.0.1:1")  # nothing listens there
    with pytest.raises(InvalidArgumentError):
        async with connect(bootstrap, **changes):
            pass


def test_arguments_of_the_wrong_kind_are_type_errors_too() -> None:
    for changes in ({"topics": "orders"}, {"assignors": [7]}, {"listener": object()}):
        with pytest.raises(TypeError) as refused:
            member(**changes)
        assert isinstance(refused.value, InvalidArgumentTypeError)


async def test_misuse_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as outside:
        _ = Admin().connection  # not entered
    assert isinstance(outside.value, RuntimeError)
    m = member(bootstrap="127.0.0.1:1")
    async with m:
        with pytest.raises(UsageError, match="only once"):
            await m.__aenter__()
