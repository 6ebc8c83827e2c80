"""``cooperative-deferred`` in real members against the coordinator on loopback: a
member that leaves and comes back within the delay gets its partitions back, and the
others never take them over in between."""

from __future__ import annotations

from typing import Any

from huddle.client import Admin, Member, TopicPartition
from huddle.client.assignors.deferred import DeferredAssignor
from tests.helpers import wait_until


def deferred_member(bootstrap: str, **kwargs: Any) -> Member:
    settings: dict[str, Any] = {
        "group_id": "g",
        "topics": ["t"],
        # a delay far longer than the test: lost partitions must stay held throughout
        "assignors": [DeferredAssignor(scheduled_rebalance_max_delay_ms=600_000)],
        "session_timeout_ms": 2_000,
        "heartbeat_interval_ms": 200,
        "rebalance_timeout_ms": 5_000,
    }
    settings.update(kwargs)
    return Member(bootstrap, **settings)


def every(n: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition("t", p) for p in range(n))


async def test_a_bounced_member_gets_its_partitions_back(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", 4)
    async with deferred_member(bootstrap) as stayer:
        async with deferred_member(bootstrap) as leaver:
            await wait_until(
                lambda: (
                    stayer.assignment | leaver.assignment == every(4)
                    and not stayer.assignment & leaver.assignment
                ),
                what="the partitions to be shared",
            )
            mine = stayer.assignment
            gone = leaver.assignment
            generation = stayer.generation
        await wait_until(lambda: stayer.generation > generation, what="the leave rebalance")
        assert stayer.assignment == mine  # the leaver's partitions are held, not taken
        async with deferred_member(bootstrap) as returning:
            await wait_until(lambda: returning.assignment == gone, what="the partitions back")
            assert stayer.assignment == mine
