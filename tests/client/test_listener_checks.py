"""A listener is checked where it is given (issue 24, item 15): one without a required
callback is refused when the ``Member`` is made, with a clear ``TypeError``; one without an
optional callback runs, the missing one doing nothing, and never fails a running member."""

from __future__ import annotations

from typing import cast

import pytest

from huddle.client import Admin, Member, RebalanceListener, TopicPartition
from huddle.client.assignors.high_availability import HighAvailabilityAssignor
from huddle.client.listener import OPTIONAL, REQUIRED, Callbacks, ListenerLike
from huddle.protocol.errors import HuddleError, InvalidArgumentTypeError
from tests.builders import tps
from tests.helpers import wait_until


def typed(listener: object) -> ListenerLike:
    """``listener`` as Member's argument: its callbacks were set at run time."""
    return cast(ListenerLike, listener)


class Recorder:
    """A listener that is no RebalanceListener: only the callbacks it is given."""

    def __init__(self, *names: str) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []
        for name in names:
            setattr(self, name, self._recording(name))

    def _recording(self, name: str) -> object:
        async def callback(*args: object) -> None:
            self.calls.append((name, args))

        return callback


@pytest.mark.parametrize("missing", OPTIONAL)
async def test_a_listener_without_an_optional_callback_is_taken(missing: str) -> None:
    listener = Recorder(*REQUIRED, *(n for n in OPTIONAL if n != missing))
    Member("127.0.0.1:1", group_id="g", topics=["t"], listener=typed(listener))  # accepted
    callbacks = Callbacks(listener)
    args = (tps("t-0"), tps("t-1")) if missing == "on_replicas_assigned" else (tps("t-0"),)
    await callbacks.call(missing, *args)  # nothing happens, nothing fails
    await callbacks.call("on_partitions_assigned", tps("t-2"))
    assert listener.calls == [("on_partitions_assigned", (tps("t-2"),))]


@pytest.mark.parametrize("missing", REQUIRED)
def test_a_listener_without_a_required_callback_is_refused_when_the_member_is_made(
    missing: str,
) -> None:
    listener = Recorder(*(n for n in REQUIRED + OPTIONAL if n != missing))
    with pytest.raises(TypeError, match=missing) as refused:
        Member("127.0.0.1:1", group_id="g", topics=["t"], listener=typed(listener))
    assert isinstance(refused.value, InvalidArgumentTypeError)
    assert isinstance(refused.value, HuddleError)


def test_a_callback_that_cannot_be_called_is_refused() -> None:
    listener = Recorder(*REQUIRED)
    listener.on_replicas_assigned = "not a function"  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentTypeError, match="on_replicas_assigned"):
        Member("127.0.0.1:1", group_id="g", topics=["t"], listener=typed(listener))


async def test_a_plain_function_callback_runs_too() -> None:
    seen: list[frozenset[TopicPartition]] = []

    class Plain:
        def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
            seen.append(revoked)

        async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
            seen.append(assigned)

    callbacks = Callbacks(Plain())
    await callbacks.call("on_partitions_revoked", tps("t-0"))
    await callbacks.call("on_partitions_assigned", tps("t-1"))
    assert seen == [tps("t-0"), tps("t-1")]


async def test_a_standby_for_a_listener_without_on_replicas_assigned_fails_nothing(
    bootstrap: str,
) -> None:
    """A lag-aware assignor hands out standby tasks: the members, whose listeners lack
    ``on_replicas_assigned`` (and ``on_partitions_lost``), keep running with them. Before,
    the first standby failed the member mid-rebalance (MemberFailedError(AttributeError))."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 2)

    def member(name: str, listener: Recorder) -> Member:
        return Member(
            bootstrap,
            group_id="g",
            topics=["t"],
            client_id=name,
            assignors=[HighAvailabilityAssignor(num_standby_replicas=1)],
            session_timeout_ms=2_000,
            heartbeat_interval_ms=100,
            listener=typed(listener),
            lags=dict,  # no state kept yet: every task as far behind
        )

    a_heard, b_heard = Recorder(*REQUIRED), Recorder(*REQUIRED)
    async with member("a", a_heard) as a, member("b", b_heard) as b:
        await a.wait_stable(10)
        await b.wait_stable(10)
        await wait_for_standby(a, b)
        assert a.assignment | b.assignment == tps("t-0 t-1")
        assert a.standby | b.standby == tps("t-0 t-1")
        assert not a.assignment & a.standby
        assert not b.assignment & b.standby


async def wait_for_standby(*members: Member) -> None:
    await wait_until(
        lambda: all(m.standby and m.assignment and m.connected for m in members),
        what="each member running one task and standing by for the other",
    )
    for m in members:
        await m.wait_stable(10)  # raises if the member failed meanwhile


class NoWarmup:
    """``on_replicas_assigned`` takes one set; the member passes two (standby, warm-up)."""

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None: ...

    async def on_replicas_assigned(self, standby: frozenset[TopicPartition]) -> None: ...


class NoArgument:
    async def on_partitions_revoked(self) -> None: ...

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None: ...


class KeywordOnly(RebalanceListener):
    async def on_partitions_lost(self, *, lost: frozenset[TopicPartition]) -> None: ...  # type: ignore[override]


@pytest.mark.parametrize(
    "listener",
    [NoWarmup(), NoArgument(), KeywordOnly(), RebalanceListener],
    ids=["on_replicas_assigned-one-argument", "no-argument", "keyword-only", "a-class"],
)
def test_a_listener_that_cannot_take_its_arguments_is_refused_when_given(
    listener: object,
) -> None:
    """Before, only ``callable()`` was checked: a wrong arity was accepted and failed the
    member at its first standby (or loss), and the class itself was taken for a listener."""
    with pytest.raises(TypeError) as refused:
        Member("127.0.0.1:1", group_id="g", topics=["t"], listener=typed(listener))
    assert isinstance(refused.value, InvalidArgumentTypeError)
    assert str(refused.value)


async def test_callbacks_that_take_more_than_they_are_given_run() -> None:
    heard: list[tuple[object, ...]] = []

    class Flexible:
        async def on_partitions_revoked(self, *partitions: frozenset[TopicPartition]) -> None:
            heard.append(partitions)

        async def on_partitions_assigned(
            self, assigned: frozenset[TopicPartition], note: str = "default"
        ) -> None:
            heard.append((assigned, note))

    callbacks = Callbacks(Flexible())
    await callbacks.call("on_partitions_revoked", tps("t-0"))
    await callbacks.call("on_partitions_assigned", tps("t-1"))
    assert heard == [(tps("t-0"),), (tps("t-1"), "default")]


async def test_a_callback_replaced_after_the_member_is_made_is_the_one_called() -> None:
    """Callbacks are looked up when called: a test that monkeypatches its listener's
    method after making the member gets its replacement called."""
    listener = Recorder(*REQUIRED)
    callbacks = Callbacks(listener)
    heard: list[frozenset[TopicPartition]] = []

    async def replaced(assigned: frozenset[TopicPartition]) -> None:
        heard.append(assigned)

    listener.on_partitions_assigned = replaced  # type: ignore[attr-defined]
    await callbacks.call("on_partitions_assigned", tps("t-1"))
    assert heard == [tps("t-1")]
    assert listener.calls == []
