"""``Member(group_protocol="consumer")`` heartbeats while a callback runs, as a Kafka
consumer's background thread does: a revocation slower than the session timeout (within the
rebalance timeout) costs it nothing. Meanwhile it reports the partitions it revokes as owned
still, so the coordinator gives them to another member only once the callback returned."""

from __future__ import annotations

import anyio

from huddle.client.member import Member
from huddle.coordinator.consumer.timeouts import SessionEnds
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

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        if revoked:
            self.revoking.set()
            await self.release.wait()
            assert self.member is not None
            self.epochs.append(self.member.generation)
        await super().on_partitions_revoked(revoked)


async def test_a_revocation_slower_than_the_session_timeout_keeps_the_member_in_the_group() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=SESSION_MS, consumer_heartbeat_interval_ms=200
    )
    slow, other = SlowRevoker(), Recorder()
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 2)
        async with _member(bootstrap, slow) as a:
            slow.member = a
            await a.wait_stable(10)
            assert a.assignment == _all(2)
            epoch, member_id = a.generation, a.member_id
            async with _member(bootstrap, other) as b:
                await slow.revoking.wait()
                core = server.consumer.core
                session = SessionEnds("g", member_id)
                first = core.timers.deadline(session)
                assert first is not None
                # the coordinator saw heartbeats for longer than a session meanwhile: the
                # session deadline it had when the revocation began is long past
                await wait_until(
                    lambda: (core.timers.deadline(session) or 0) > first + 2 * SESSION_MS,
                    wait_s=10,
                    what="heartbeats during the revocation for two sessions",
                )
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
