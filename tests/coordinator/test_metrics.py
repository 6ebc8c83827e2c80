"""Prometheus metrics: the coordinator's /metrics (huddle serve --metrics-port) and a
member's, in the registry the application passes in; values move as groups rebalance."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from huddle.testing import CoordinatorProcess, wait_settled
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from structlog.typing import EventDict

from huddle.client.admin import Admin
from huddle.client.connection import connect
from huddle.client.member import Member
from huddle.coordinator.config import ServerConfig
from huddle.protocol.messages import HeartbeatRequest, HeartbeatResponse
from tests.helpers import eventually, fast_server_config, running_server, wait_until


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of http://127.0.0.1:PORT/metrics: (name, sorted labels) -> value."""

    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())

    text = await asyncio.to_thread(get)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_the_coordinator_s_metrics_follow_its_groups(logs: list[EventDict]) -> None:
    async with running_server(fast_server_config(metrics_port=0)) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        port = server.metrics_port
        assert port > 0
        before = await scrape(port)
        assert value(before, "huddle_members") == 0
        async with Admin(bootstrap) as admin:
            await admin.create_topic("t", 4)

        def member() -> Member:
            return Member(bootstrap, group_id="g", topics=["t"], heartbeat_interval_ms=100)

        async with member() as a, member() as b:
            await wait_settled([a, b], {"t": 4})
            await a.commit({next(iter(a.assignment)): 5})
            first = await scrape(port)
            assert value(first, "huddle_groups", state="Stable") == 1
            assert value(first, "huddle_members") == 2
            assert value(first, "huddle_connections") >= 2
            assert value(first, "huddle_rebalances_total", reason="new member joined") >= 1
            assert value(first, "huddle_rebalance_duration_seconds_count") >= 1
            assert value(first, "huddle_join_phase_seconds_count") >= 1
            assert value(first, "huddle_sync_phase_seconds_count") >= 1
            assert value(first, "huddle_commits_total", listener="huddle") >= 1
            async with connect(bootstrap) as conn:  # a heartbeat of nobody: an error answered
                wrong = HeartbeatRequest(group_id="g", generation_id=1, member_id="nobody")
                assert isinstance(await conn.request(wrong), HeartbeatResponse)

            async def moved() -> bool:
                now = await scrape(port)
                return (
                    value(now, "huddle_heartbeats_total", listener="huddle")
                    > value(first, "huddle_heartbeats_total", listener="huddle")
                    and value(now, "huddle_errors_total", code="UNKNOWN_MEMBER_ID") >= 1
                )

            await eventually(moved, what="heartbeats and the error to be counted")
            async with member() as c:
                await wait_settled([a, b, c], {"t": 4})
                third = await scrape(port)
                assert value(third, "huddle_members") == 3
                assert value(third, "huddle_rebalance_duration_seconds_count") > value(
                    first, "huddle_rebalance_duration_seconds_count"
                )
                assert value(third, "huddle_notices_total", type="RebalanceStarted") >= 1


@pytest.mark.e2e
async def test_a_member_s_metrics_in_the_application_s_registry(logs: list[EventDict]) -> None:
    registry = CollectorRegistry()
    with CoordinatorProcess(["--disconnect-grace-ms", "-1"]) as coordinator:
        async with Admin(coordinator.bootstrap) as admin:
            await admin.create_topic("t", 4)

        def member(name: str) -> Member:
            return Member(
                coordinator.bootstrap,
                group_id="g",
                topics=["t"],
                client_id=name,
                metrics_registry=registry,
                session_timeout_ms=1_000,
                heartbeat_interval_ms=100,
            )

        async with member("a") as a, member("b") as b:
            await wait_settled([a, b], {"t": 4})

            def sample(name: str, client: str) -> float:
                got = registry.get_sample_value(name, {"group": "g", "client_id": client})
                return 0.0 if got is None else got

            owned = [sample("huddle_member_partitions_owned", c) for c in ("a", "b")]
            assert sum(owned) == 4
            assert sample("huddle_member_rebalances_total", "a") >= 1
            assert sample("huddle_member_last_rebalance_seconds", "a") > 0
            assert sample("huddle_member_unassigned_seconds_total", "a") > 0
            assert sample("huddle_member_lost_total", "a") == 0
            coordinator.kill()  # heard from by nobody for a session: the partitions are lost
            await wait_until(
                lambda: (
                    sample("huddle_member_lost_total", "a") == 1
                    and sample("huddle_member_lost_total", "b") == 1
                ),
                what="both members to declare their partitions lost",
            )
            assert sample("huddle_member_partitions_owned", "a") == 0
        # closed members leave the registry
        assert (
            registry.get_sample_value(
                "huddle_member_partitions_owned", {"group": "g", "client_id": "a"}
            )
            is None
        )


def test_a_metrics_port_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="metrics port"):
        ServerConfig(metrics_port=70_000)


def test_a_member_counts_a_rebalance_once_however_many_joins_it_takes() -> None:
    from huddle.client.metrics import MemberStats

    stats = MemberStats("g", "a", lambda: 0)
    stats.joining()
    stats.joining()  # KIP-394's second JoinGroup, or a retried one: the same rebalance
    stats.synced()
    stats.joining()
    assert stats.rebalances == 2


async def test_two_members_of_a_group_with_one_client_id_cannot_share_a_registry(
    logs: list[EventDict],
) -> None:
    registry = CollectorRegistry()
    async with running_server(fast_server_config()) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        async with Member(bootstrap, group_id="g", topics=["t"], metrics_registry=registry):
            twin = Member(bootstrap, group_id="g", topics=["t"], metrics_registry=registry)
            with pytest.raises(ValueError, match="its own client_id"):
                await twin.__aenter__()
