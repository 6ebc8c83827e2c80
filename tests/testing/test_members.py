"""huddle.testing's members and assertions (issue 24, items 20 and 21): a member the
coordinator refuses for good stays in the test's view and fails ``wait_settled`` at once,
and what huddle.testing raises on purpose is a ``HuddleError``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest
from huddle.testing import CoordinatorProcess, MemberSet, NotSettledError, wait_settled
from huddle.testing.coordinator import CoordinatorError

from huddle.client import Admin, MemberFailedError
from huddle.protocol.errors import ErrorCode, HuddleError, InvalidArgumentError
from tests.helpers import FAST_GROUP, fast_server_config, running_server


@pytest.fixture
async def one_member_groups() -> AsyncIterator[str]:
    """A coordinator whose groups take one member at most, with topic t of 2 partitions."""
    config = fast_server_config(group=replace(FAST_GROUP, max_group_size=1))
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 2)
        yield bootstrap


def test_coordinator_error_is_a_huddle_error() -> None:
    with pytest.raises(HuddleError) as refused:
        _ = CoordinatorProcess().bootstrap  # not started
    assert isinstance(refused.value, CoordinatorError)
    assert isinstance(refused.value, RuntimeError)  # as before


async def test_a_member_name_used_twice_is_a_huddle_error(one_member_groups: str) -> None:
    async with MemberSet(one_member_groups).running() as running:
        await running.start("a", group_id="g", topics=["t"])
        with pytest.raises(HuddleError) as refused:
            await running.start("a", group_id="h", topics=["t"])
    assert isinstance(refused.value, InvalidArgumentError)
    assert isinstance(refused.value, ValueError)  # as before


@pytest.mark.parametrize("given", ["running members", "a list"])
async def test_a_member_refused_for_good_does_not_vanish_from_the_test(
    one_member_groups: str, given: str
) -> None:
    """b is refused (GROUP_MAX_SIZE_REACHED). Before, its task swallowed the failure and b
    dropped out of ``running.members``, so a ``wait_settled`` over them passed as if the
    group had one member by design; over an explicit list it waited out its deadline and
    named b '?'. Now b stays, and ``wait_settled`` raises its refusal at once."""
    async with MemberSet(one_member_groups).running() as running:
        a = await running.start("a", group_id="g", topics=["t"])
        await a.wait_stable(10)
        b = await running.start("b", group_id="g", topics=["t"])
        with pytest.raises(MemberFailedError):
            await b.wait_stable(10)
        assert set(running.members) == {"a", "b"}
        members = list(running.members.values()) if given == "running members" else [a, b]
        with anyio.fail_after(5), pytest.raises(MemberFailedError) as refused:
            await wait_settled(members, {"t": 2}, within=60)
        assert refused.value.code is ErrorCode.GROUP_MAX_SIZE_REACHED
        await running.stop("b")  # stopping it takes it out, and frees its name
        assert set(running.members) == {"a"}
        await wait_settled(running.members.values(), {"t": 2}, within=10)


async def test_not_settled_names_every_member(one_member_groups: str) -> None:
    async with MemberSet(one_member_groups).running() as running:
        a = await running.start("a", group_id="g", topics=["t"])
        await a.wait_stable(10)
        with pytest.raises(NotSettledError) as unsettled:
            await wait_settled([a], {"t": 3}, within=0.2)  # t has 2 partitions
    assert isinstance(unsettled.value, HuddleError)
    assert isinstance(unsettled.value, AssertionError)
    assert a.member_id in str(unsettled.value)


def test_the_errors_a_test_catches_come_from_huddle_testing() -> None:
    import huddle.testing

    from huddle.client import MemberFailedError as member_failed

    assert huddle.testing.CoordinatorError is CoordinatorError
    assert huddle.testing.NotSettledError is NotSettledError
    assert huddle.testing.MemberFailedError is member_failed
    assert huddle.testing.InvalidArgumentError is InvalidArgumentError
    assert huddle.testing.HuddleError is HuddleError
    for name in huddle.testing.__all__:
        assert getattr(huddle.testing, name) is not None
