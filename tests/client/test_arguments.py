"""Every bad argument to the client library's public constructors is a ``HuddleError``, said
where it is given (issue 24, item 21): an ``InvalidArgumentError`` that is also a
``ValueError`` (of the wrong kind: an ``InvalidArgumentTypeError``, also a ``TypeError``).
Misuse is a ``UsageError``, also a ``RuntimeError``."""

from __future__ import annotations

import math
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from huddle.client import Admin, HuddleError, Member, TopicPartition
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
    # the coordinator would refuse these minutes later (INVALID_REQUEST), or nan fail the
    # member with a plain ValueError out of async with
    "a session timeout not a whole number": {"session_timeout_ms": 10_000.5},
    "an infinite session timeout": {"session_timeout_ms": math.inf},
    "a session timeout of nan": {"session_timeout_ms": math.nan},
    "a rebalance timeout of nan": {"rebalance_timeout_ms": math.nan},
    "a session timeout over 32 bits": {"session_timeout_ms": 2**31},
    "a retry backoff of nan": {"retry_backoff_ms": math.nan},
    "a heartbeat interval of 0": {"heartbeat_interval_ms": 0},
    "a heartbeat interval over the session timeout": {"heartbeat_interval_ms": 20_000},
    "a rebalance timeout of 0": {"rebalance_timeout_ms": 0},
    "a negative retry backoff": {"retry_backoff_ms": -1},
    "a negative largest backoff": {"max_retry_backoff_ms": -5},
    "a bootstrap address without a port": {"bootstrap": "localhost"},
    "no bootstrap list (None)": {"bootstrap": None},
    "a bootstrap list of the wrong kind": {"bootstrap": ["localhost:9292"]},
    "a bootstrap port out of range": {"bootstrap": "localhost:99999"},
    "no bootstrap address": {"bootstrap": " , "},
    "lags that cannot be called": {"lags": {}},
    "security of the wrong kind": {"security": "tls"},
    "a listener without callbacks": {"listener": object()},
    "a metrics registry of the wrong kind": {"metrics_registry": "x"},
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
    "Admin: a timeout of nan": lambda: Admin(timeout=math.nan),
    "Admin: an infinite timeout": lambda: Admin(timeout=math.inf),
    "Admin: no bootstrap list (None)": lambda: Admin(None),  # type: ignore[arg-type]
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
    "high-availability: standbys as a str": lambda: HighAvailabilityAssignor(
        num_standby_replicas="1"  # type: ignore[arg-type]
    ),
    "high-availability: a recovery lag of nan": lambda: HighAvailabilityAssignor(
        acceptable_recovery_lag=math.nan  # type: ignore[arg-type]
    ),
    "cooperative-deferred: no moves per round": lambda: DeferredAssignor(max_moves_per_round=0),
    "cooperative-deferred: a negative delay": lambda: DeferredAssignor(
        scheduled_rebalance_max_delay_ms=-1
    ),
    "cooperative-deferred: a negative pause": lambda: DeferredAssignor(move_pause_ms=-1),
    "cooperative-deferred: moves per round as a str": lambda: DeferredAssignor(
        max_moves_per_round="1"  # type: ignore[arg-type]
    ),
    "cooperative-deferred: a delay not a whole number": lambda: DeferredAssignor(
        scheduled_rebalance_max_delay_ms=1.5  # type: ignore[arg-type]
    ),
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


TP = TopicPartition("t", 0)
METHOD_CALLS: dict[str, Callable[[Member], Awaitable[object]]] = {
    "commit: offsets keyed by topic names": lambda m: m.commit({"t": 1}),  # type: ignore[dict-item]
    "commit: a list of pairs": lambda m: m.commit([(TP, 1)]),  # type: ignore[arg-type]
    "commit: keyed by plain tuples": lambda m: m.commit({("t", 0): 1}),  # type: ignore[dict-item]
    "commit: an offset over 64 bits": lambda m: m.commit({TP: 2**70}),
    "commit: a negative offset": lambda m: m.commit({TP: -1}),
    "commit: an offset not a whole number": lambda m: m.commit({TP: 1.5}),  # type: ignore[dict-item]
    "commit: metadata of the wrong kind": lambda m: m.commit({TP: 1}, metadata=5),  # type: ignore[arg-type]
    "committed: a topic name": lambda m: m.committed("t"),  # type: ignore[arg-type]
    "committed: plain tuples": lambda m: m.committed([("t", 0)]),  # type: ignore[list-item]
    "committed: a number": lambda m: m.committed(5),  # type: ignore[arg-type]
    "wait_stable: a timeout as a str": lambda m: m.wait_stable("x"),  # type: ignore[arg-type]
    "wait_stable: a timeout of nan": lambda m: m.wait_stable(math.nan),
    "wait_stable: a negative timeout": lambda m: m.wait_stable(-1),
}


@pytest.mark.parametrize("call", METHOD_CALLS.values(), ids=METHOD_CALLS.keys())
async def test_a_method_refuses_a_bad_argument_with_a_huddle_error(
    call: Callable[[Member], Awaitable[object]],
) -> None:
    """Before: AttributeError, OverflowError or TypeError from deep inside (a negative
    offset: the coordinator's INVALID_REQUEST). Checked before anything else, connected or
    not."""
    m = member(bootstrap="127.0.0.1:1")
    with pytest.raises(InvalidArgumentError) as refused:
        await call(m)
    assert str(refused.value)


async def test_wait_stable_on_a_closed_member_says_so_at_once(bootstrap: str) -> None:
    """Before, it waited for ever (a member closed normally has no failure to raise)."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 1)
    async with member(bootstrap=bootstrap) as m:
        await m.wait_stable(10)
    with anyio.fail_after(5), pytest.raises(UsageError, match="closed"):
        await m.wait_stable()
