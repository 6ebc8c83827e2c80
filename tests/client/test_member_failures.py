"""What the application sees when its own code fails inside the member: one
MemberFailedError, its exception chained; never a bare CancelledError or an exception group.
Plus the exception family every huddle error belongs to."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import pytest
from structlog.typing import EventDict

import huddle
from huddle.client import (
    Admin,
    ClientError,
    ConnectionClosedError,
    HuddleError,
    Member,
    MemberFailedError,
    NotConnectedError,
    RebalanceListener,
    RequestTimeoutError,
    ServerError,
    TopicPartition,
)
from huddle.client.assignors import CooperativeStickyAssignor
from huddle.client.assignors.base import GroupAssignment, MemberSubscription
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol import errors
from huddle.protocol.errors import ErrorCode, GroupIdNotFoundError, TopicAlreadyExistsError
from tests.helpers import MEMBER_SESSION_MS, member, wait_until


class Boom(Exception):
    """The application's own bug."""


class ExplodingListener(RebalanceListener):
    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        raise Boom("the listener broke")


class ExplodingAssignor(CooperativeStickyAssignor):
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, MemberSubscription],
    ) -> GroupAssignment:
        raise Boom("the assignor broke")


async def create_topic(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 4)


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"listener": ExplodingListener()}, "the listener broke"),
        ({"assignors": [ExplodingAssignor()]}, "the assignor broke"),
    ],
    ids=["listener", "assignor"],
)
async def test_an_exception_in_application_code_surfaces_from_wait_stable(
    bootstrap: str, kwargs: dict[str, object], said: str
) -> None:
    await create_topic(bootstrap)
    with pytest.raises(MemberFailedError) as caught:
        async with member(bootstrap, **kwargs) as m:
            await m.wait_stable(timeout=10)
    assert type(caught.value) is MemberFailedError  # not a group, not a cancellation
    assert isinstance(caught.value.__cause__, Boom)
    assert said in str(caught.value)


async def test_an_exception_in_application_code_surfaces_from_the_members_block(
    bootstrap: str,
) -> None:
    """The application waits on something of its own: it is woken, and the block raises."""
    await create_topic(bootstrap)

    async def wait_forever() -> None:
        async with member(bootstrap, listener=ExplodingListener()):
            with anyio.fail_after(10):
                await anyio.sleep_forever()

    with pytest.raises(MemberFailedError) as caught:
        await wait_forever()
    assert isinstance(caught.value.__cause__, Boom)


async def test_the_member_still_leaves_cleanly_when_nothing_failed(bootstrap: str) -> None:
    await create_topic(bootstrap)
    async with member(bootstrap) as m:
        await m.wait_stable(timeout=10)
    async with Admin(bootstrap) as admin:  # it left: the empty group is forgotten
        with pytest.raises(GroupIdNotFoundError):
            await admin.describe("g")


async def test_the_applications_own_exception_passes_through_unchanged(bootstrap: str) -> None:
    await create_topic(bootstrap)

    async def fail_in_the_block() -> None:
        async with member(bootstrap) as m:
            await m.wait_stable(timeout=10)
            raise Boom("the application's own")

    with pytest.raises(Boom):
        await fail_in_the_block()


def test_every_exception_huddle_raises_on_purpose_is_a_huddle_error() -> None:
    assert huddle.HuddleError is HuddleError
    for cls in (MemberFailedError, ConnectionClosedError, RequestTimeoutError, NotConnectedError):
        assert issubclass(cls, HuddleError)
    for cls in (ConnectionClosedError, RequestTimeoutError, NotConnectedError):
        assert issubclass(cls, ClientError)
        assert not issubclass(cls, ServerError)
    assert issubclass(RequestTimeoutError, TimeoutError)  # still caught as a timeout
    for code in ErrorCode:
        if code is not ErrorCode.NONE:
            registered = errors.error_class(code)
            assert issubclass(registered, ServerError)
            assert registered.code is code
    assert errors.error_class(ErrorCode.NOT_COORDINATOR).retriable
    assert not errors.error_class(ErrorCode.FENCED_INSTANCE_ID).retriable


async def test_what_the_coordinator_answers_is_a_server_error_with_its_code(
    bootstrap: str,
) -> None:
    await create_topic(bootstrap)
    async with Admin(bootstrap) as admin:
        with pytest.raises(HuddleError) as caught:
            await admin.create_topic("t", 4)
    assert isinstance(caught.value, TopicAlreadyExistsError)
    assert isinstance(caught.value, ServerError)
    assert caught.value.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert not caught.value.retriable


async def test_a_commit_while_disconnected_is_a_client_error(bootstrap: str) -> None:
    m = member("127.0.0.1:1")  # nothing listens there: never connected
    async with m:
        with pytest.raises(NotConnectedError):
            await m.commit({TopicPartition("t", 0): 1})


class SlowFirstAssignment(RebalanceListener):
    """Its first on_partitions_assigned waits to be released (state being restored)."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.calls: list[frozenset[TopicPartition]] = []
        self.finished = False
        self.cut_off = False
        self.member: Member | None = None
        self.commit_error: BaseException | None = None

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self.calls.append(assigned)
        if len(self.calls) > 1:
            return
        self.entered.set()
        try:
            await self.release.wait()
        except BaseException:
            self.cut_off = True
            raise
        assert self.member is not None
        try:  # the connection is gone: told at once, not after a timeout
            await self.member.commit(dict.fromkeys(assigned, 1))
        except Exception as exc:
            self.commit_error = exc
        self.finished = True


async def test_a_callback_is_not_cut_off_by_a_lost_connection(
    server: CoordinatorServer, bootstrap: str, logs: list[EventDict]
) -> None:
    """The member's connection drops while on_partitions_assigned runs: the callback runs
    to its end (it is never cancelled half-way, which would leave the application owning
    partitions it never took up), then the member reconnects and keeps them."""
    await create_topic(bootstrap)
    listener = SlowFirstAssignment()
    async with member(bootstrap, listener=listener, session_timeout_ms=10_000) as m:
        listener.member = m
        with anyio.fail_after(10):
            await listener.entered.wait()
        for conn in server.connections():
            conn.close("dropped by the test")
        await wait_until(  # the member noticed (or, cut off, its callback did)
            lambda: not m._runtime.offline.serving or listener.cut_off, what="the loss noticed"
        )
        listener.release.set()
        await wait_until(
            lambda: (
                sum(e["event"] == "member_connected" for e in logs) >= 2 and len(m.assignment) == 4
            ),
            what="the member back, owning its partitions",
        )
        assert listener.finished
        assert not listener.cut_off
        assert isinstance(listener.commit_error, NotConnectedError)
        assert listener.calls == [frozenset(TopicPartition("t", p) for p in range(4))]


class StuckRevocation(RebalanceListener):
    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        if revoked:
            await anyio.sleep_forever()  # waits on something that never comes


async def test_closing_gives_up_a_callback_that_never_returns(bootstrap: str) -> None:
    """Callbacks are shielded from a lost connection, not from closing: a member whose
    on_partitions_revoked never returns still closes, after its session timeout."""
    await create_topic(bootstrap)
    with anyio.fail_after(MEMBER_SESSION_MS / 1000 + 10):
        async with member(bootstrap, listener=StuckRevocation()) as m:
            await m.wait_stable()
            assert len(m.assignment) == 4
