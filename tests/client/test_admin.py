"""client.admin against the real server."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from huddle.client.admin import Admin
from huddle.client.connection import connect
from huddle.client.unreachable import CoordinatorUnreachableError
from huddle.protocol.errors import (
    GroupIdNotFoundError,
    HuddleError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from huddle.protocol.messages import JoinGroupResponse
from tests.helpers import fast_server_config, join_request, running_server, wait_until


async def test_topic_lifecycle(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        assert await admin.list_topics() == {}
        await admin.create_topic("orders", 3)
        await admin.create_topic("audit", 1)
        assert await admin.list_topics() == {"audit": 1, "orders": 3}
        await admin.alter_topic("orders", 6)
        assert (await admin.list_topics())["orders"] == 6
        await admin.delete_topic("audit")
        assert await admin.list_topics() == {"orders": 6}


async def test_topic_errors_raise_registered_exceptions(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("orders", 3)
        with pytest.raises(TopicAlreadyExistsError):
            await admin.create_topic("orders", 3)
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.delete_topic("nope")
        with pytest.raises(HuddleError):
            await admin.create_topic("bad", 0)
        # The connection is still fine after errors.
        assert await admin.list_topics() == {"orders": 3}


async def test_groups(bootstrap: str) -> None:
    async with connect(bootstrap, client_id="member-1") as member, Admin(bootstrap) as admin:
        assert await admin.list_groups() == []
        first = await member.request(join_request(), timeout=5)
        assert isinstance(first, JoinGroupResponse)
        joined = await member.request(join_request(first.member_id), timeout=5)
        assert isinstance(joined, JoinGroupResponse)
        groups = await admin.list_groups()
        assert [g.group_id for g in groups] == ["g"]
        assert groups[0].protocol_type == "consumer"
        described = await admin.describe_group("g")
        assert described.generation_id == joined.generation_id
        assert [m.member_id for m in described.members] == [joined.member_id]
        assert described.members[0].client_id == "member-1"
        assert described.members[0].client_host == "127.0.0.1"
        with pytest.raises(GroupIdNotFoundError):
            await admin.describe_group("nope")


async def test_admin_outside_its_context() -> None:
    admin = Admin("127.0.0.1:9")
    with pytest.raises(RuntimeError, match="async with"):
        await admin.list_topics()


async def test_an_admin_that_cannot_connect_says_where_with_a_huddle_error() -> None:
    with pytest.raises(OSError, match="connection refused") as caught:
        async with Admin("127.0.0.1:1"):
            pass
    assert isinstance(caught.value, CoordinatorUnreachableError)
    assert isinstance(caught.value, HuddleError)
    assert str(caught.value) == "cannot connect to 127.0.0.1:1: connection refused"
    # a call that must connect again, to a coordinator gone meanwhile, says the same
    async with AsyncExitStack() as stack:
        async with running_server(fast_server_config()) as server:
            address = f"127.0.0.1:{server.port}"
            admin = await stack.enter_async_context(Admin(address))
            await admin.create_topic("t", 1)
        await wait_until(lambda: admin.connection.closed, what="the connection to close")
        with pytest.raises(CoordinatorUnreachableError, match=f"^cannot connect to {address}:"):
            await admin.list_topics()


async def test_an_admin_left_idle_past_the_coordinators_idle_timeout_goes_on() -> None:
    """The coordinator closes connections that hold no member and stay idle (as Kafka's
    brokers do); an Admin then connects again for its next call, as Kafka's AdminClient."""
    config = fast_server_config(idle_timeout_ms=200)
    async with running_server(config) as server, Admin(f"127.0.0.1:{server.port}") as admin:
        await admin.create_topic("orders", 3)
        first = admin.connection
        await wait_until(lambda: first.closed, what="the idle connection to be closed")
        assert await admin.list_topics() == {"orders": 3}
        assert admin.connection is not first
