"""``Member(group_protocol="consumer")`` heartbeats while a callback runs, as a Kafka
consumer's background thread does: a revocation slower than the session timeout (within the
rebalance timeout) costs it nothing. Meanwhile it reports the partitions it revokes as owned
still, so the coordinator gives them to another member only once the callback returned."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import anyio

from huddle.client.member import Member
from huddle.coordinator.consumer.timeouts import SessionEnds
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.embedded import TopicPartition
from tests.client.test_consumer_member import Recorder, _all, _member, _topic
from tests.helpers import fast_server_config, running_server, wait_until

SESSION_MS = 1_000


class SlowRevoker(Recorder):
    """Its ``on_partitions_revoked`` runs until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.revoking = anyio.Event()
        self.release = anyio.Event()
        self.epochs: list[int] = []  # the member's epoch as each revocation returned
        self.member: Member | None = None
        self.epoch = 0  # the member's epoch before the revocation

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        if revoked:
            self.revoking.set()
            await self.release.wait()
            assert self.member is not None
            self.epochs.append(self.member.generation)
        await super().on_partitions_revoked(revoked)


@contextlib.asynccontextmanager
async def _revoking(
    slow: SlowRevoker, other: Recorder, rebalance_timeout_ms: int = 30_000, also: str = ""
) -> AsyncIterator[tuple[CoordinatorServer, Member, Member]]:
    """Member a (``slow``, with ``rebalance_timeout_ms``; ``also``: more bootstrap addresses
    after the server's) owned t's two partitions; b (``other``) joined, and a's revocation
    of one of them has begun (it runs until ``slow.release``)."""
    config = fast_server_config(
        consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=200
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        a_member = Member(
            bootstrap + also,
            group_id="g",
            topics=["t"],
            listener=slow,
            rebalance_timeout_ms=rebalance_timeout_ms,
            group_protocol="consumer",
        )
        async with a_member as a:
            slow.member = a
            await a.wait_stable(10)
            assert a.assignment == _all(2)
            slow.epoch = a.generation
            async with _member(bootstrap, other) as b:
                await slow.revoking.wait()
                yield server, a, b


async def _two_sessions_heartbeated(server: CoordinatorServer, member_id: str) -> None:
    """Until the coordinator saw heartbeats of ``member_id`` for two sessions from now: the
    session deadline it has now is long past."""
    core = server.consumer.core
    session = SessionEnds("g", member_id)
    first = core.timers.deadline(session)
    assert first is not None
    await wait_until(
        lambda: (core.timers.deadline(session) or 0) > first + 2 * SESSION_MS,
        wait_s=10,
        what="heartbeats for two sessions",
    )


async def test_a_revocation_slower_than_the_session_timeout_keeps_the_member_in_the_group() -> None:
    slow, other = SlowRevoker(), Recorder()
    async with _revoking(slow, other) as (server, a, b):
        epoch, member_id = slow.epoch, a.member_id
        # the coordinator saw heartbeats for longer than a session meanwhile
        await _two_sessions_heartbeated(server, member_id)
        # its session is alive, and what it revokes is its own until the callback
        # returned: nobody else was given a partition yet
        assert (a.assignment, b.assignment) == (_all(2), frozenset())
        slow.release.set()
        await wait_until(
            lambda: len(a.assignment) == len(b.assignment) == 1,
            wait_s=10,
            what="the two to share the partitions",
        )
        assert slow.lost == []  # never fenced: its session stayed alive
        assert a.member_id == member_id
        assert slow.epochs == [epoch]  # in the group at its epoch all along
        assert a.generation > epoch  # and moved on with the group, not rejoined
        assert len(slow.revoked) == 1
        assert a.failure is None


async def test_a_connection_lost_during_a_slow_revocation_is_found_again_meanwhile() -> None:
    """The member's connection drops while its revocation, slower than the session timeout,
    runs: it finds the coordinator again and heartbeats there meanwhile (as a Kafka
    consumer's background thread does), so it is still in the group at its epoch when the
    callback returns, and a commit made in the callback goes through the new connection."""
    slow, other = SlowRevoker(), Recorder()
    async with _revoking(slow, other) as (server, a, b):
        member_id = a.member_id
        for conn in server.connections():
            conn.close("dropped by the test")
        await _two_sessions_heartbeated(server, member_id)
        assert a.connected
        await a.commit(dict.fromkeys(_all(2), 7))  # in the callback, as Kafka allows
        slow.release.set()
        await wait_until(
            lambda: len(a.assignment) == len(b.assignment) == 1,
            wait_s=10,
            what="the two to share the partitions",
        )
        assert (slow.lost, a.failure) == ([], None)
        assert (a.member_id, slow.epochs) == (member_id, [slow.epoch])
        assert await b.committed(b.assignment) == dict.fromkeys(b.assignment, 7)


async def test_a_member_fenced_during_a_slow_revocation_owns_nothing_from_then_on() -> None:
    """The revocation outlasts the member's rebalance timeout: the coordinator fences it
    and gives both partitions to b. The member hears of it from a heartbeat sent while
    its callback still runs: from then on it owns nothing (b owns them), then loses what
    it held once the callback returned, and joins again."""
    slow, other = SlowRevoker(), Recorder()
    async with _revoking(slow, other, rebalance_timeout_ms=300) as (_, a, b):
        await wait_until(lambda: b.assignment == _all(2), what="b to be given both")
        await wait_until(lambda: a.generation == 0, what="a to hear of its fence")
        assert a.assignment == frozenset()  # never one partition owned by two members
        slow.release.set()
        await wait_until(
            lambda: len(a.assignment) == len(b.assignment) == 1, what="a to join again"
        )
        assert len(slow.lost) == 1
        assert len(slow.lost[0]) == 1  # what it still held as the revocation returned


async def test_a_callback_returning_while_a_coordinator_is_sought_goes_on_at_once() -> None:
    """The connection drops during the revocation, and the next bootstrap address is a node
    that accepts connections and never answers: the callback returns while the member's
    heartbeats wait on it. The member gives that wait up and goes on at once (the main
    loop finds the coordinator), not after the connection's timeout (10 s)."""
    silent: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        silent.append(writer)  # held open, never answered

    frozen = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = frozen.sockets[0].getsockname()[1]
    slow, other = SlowRevoker(), Recorder()
    try:
        async with _revoking(slow, other, also=f",127.0.0.1:{port}") as (server, a, b):
            for conn in server.connections():
                conn.close("dropped by the test")
            await wait_until(lambda: bool(silent), what="a to try the silent node")
            slow.release.set()
            released = time.monotonic()
            await wait_until(
                lambda: len(a.assignment) == len(b.assignment) == 1,
                wait_s=20,
                what="the two to share the partitions",
            )
            assert time.monotonic() - released < 5
            assert slow.lost == []
    finally:
        for writer in silent:
            writer.close()
        frozen.close()
