"""A Kafka member whose group connection closes: by default it stays until its session
timeout, as with Kafka; with ``--kafka-evict-on-close-ms`` a dynamic one is removed after
that grace, and a static one (its instance id comes back) stays either way."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from huddle.coordinator.host import CoordinatorServer
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from tests.helpers import fast_server_config, wait_until
from tests.kafka.raw import RawKafka

_SESSION_MS = 1_500


@asynccontextmanager
async def _listening(evict_on_close_ms: int | None) -> AsyncIterator[tuple[CoordinatorServer, int]]:
    overrides = {} if evict_on_close_ms is None else {"kafka_evict_on_close_ms": evict_on_close_ms}
    async with CoordinatorServer(fast_server_config(**overrides)) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        yield server, wire.port


def _members(server: CoordinatorServer, group: str) -> set[str]:
    found = server.core.sessions.groups.get(group)
    return set() if found is None else set(found.members)


async def _join_and_leave_the_connection(
    port: int, group: str, session_ms: int, instance_id: str | None = None
) -> str:
    """A member joins and syncs on one connection, which then closes; its member id."""
    async with RawKafka(port) as conn:
        joined = await conn.call(
            Api.JOIN_GROUP,
            5,
            1,
            group_id=group,
            session_timeout=session_ms,
            rebalance_timeout=10_000,
            member_id="",
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": b"\x00\x01"}],
        )
        if instance_id is None:  # v4+: KIP-394's round first
            joined = await conn.call(
                Api.JOIN_GROUP,
                5,
                2,
                group_id=group,
                session_timeout=session_ms,
                rebalance_timeout=10_000,
                member_id=joined.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[{"name": "range", "metadata": b"\x00\x01"}],
            )
        assert joined.error_code == 0
        synced = await conn.call(
            Api.SYNC_GROUP,
            3,
            3,
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=instance_id,
            assignments=[{"member_id": joined.member_id, "assignment": b""}],
        )
        assert synced.error_code == 0
    member_id: str = joined.member_id
    return member_id


async def _seconds_until_removed(server: CoordinatorServer, group: str, member_id: str) -> float:
    """From now (the member's connection just closed) until the member is gone."""
    start = time.monotonic()
    await wait_until(lambda: member_id not in _members(server, group), what="the member gone")
    return time.monotonic() - start


async def test_by_default_a_closed_connection_s_member_stays_until_its_session_timeout() -> None:
    async with _listening(None) as (server, port):  # huddle's 500 ms disconnect grace is on
        member = await _join_and_leave_the_connection(port, "g", _SESSION_MS)
        assert member in _members(server, "g")
        gone_after = await _seconds_until_removed(server, "g", member)
    assert gone_after >= _SESSION_MS / 1000 * 0.9


async def test_with_evict_on_close_a_dynamic_member_goes_after_the_grace() -> None:
    async with _listening(50) as (server, port):
        member = await _join_and_leave_the_connection(port, "g", 8_000)
        gone_after = await _seconds_until_removed(server, "g", member)
    assert gone_after < 4.0  # half the session timeout: the grace removed it, not the session


async def test_a_static_member_stays_until_its_session_timeout_either_way() -> None:
    for evict in (None, 50):
        async with _listening(evict) as (server, port):
            member = await _join_and_leave_the_connection(port, "g", _SESSION_MS, "static-1")
            gone_after = await _seconds_until_removed(server, "g", member)
        assert gone_after >= _SESSION_MS / 1000 * 0.9, evict
