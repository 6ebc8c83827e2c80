"""Unmodified Kafka clients form and heal consumer groups through a Kafka listener.

Each test runs one client's driver processes (``huddle.chaos.kafka_workers``) against each
broker of ``kafka_broker`` and follows what they print; see conftest.py for which brokers
run when.
"""

from __future__ import annotations

from typing import Final

import pytest

from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.options import COOPERATIVE_STICKY
from huddle.chaos.kafka_workers.running import Driver
from tests.kafka_clients.conftest import (
    PARTITIONS,
    TANSU_AIOKAFKA_LEAVE,
    TANSU_GAPS,
    WAIT_S,
    KafkaGroup,
    require_client,
)

pytestmark = pytest.mark.e2e

LONG_SESSION_MS: Final = 30_000  # longer than any wait: only a LeaveGroup or a static
# member's return can explain what the test sees, not a session expiring


@pytest.fixture(params=sorted(launch.CLIENTS))
def client(request: pytest.FixtureRequest, kafka_group: KafkaGroup) -> str:
    name: str = request.param
    require_client(name)
    if kafka_group.broker.name == "tansu" and name in TANSU_GAPS:
        pytest.skip(f"tansu 0.6: {TANSU_GAPS[name]}")
    return name


def test_a_group_forms_and_a_member_joins(kafka_group: KafkaGroup, client: str) -> None:
    g = kafka_group
    g.start("m1", client)
    g.start("m2", client)
    g.balanced("m1", "m2")
    g.start("m3", client)
    g.balanced("m1", "m2", "m3")
    assert all(g.drivers.all[n].of("joined") for n in ("m1", "m2", "m3"))


def test_a_cooperative_join_moves_only_what_moves(kafka_group: KafkaGroup, client: str) -> None:
    if not launch.CLIENTS[client].cooperative:
        pytest.skip(f"{client} has no cooperative-sticky assignor")
    g = kafka_group
    first = [g.start(n, client, strategy=COOPERATIVE_STICKY) for n in ("m1", "m2")]
    formed = g.balanced("m1", "m2")
    newcomer = g.start("m3", client, strategy=COOPERATIVE_STICKY)
    g.balanced("m1", "m2", "m3")
    for member in first:
        revoked = {(t, p) for e in member.of("revoked", formed) for t, p in e["partitions"]}
        assert revoked <= newcomer.owned, f"{member.name} gave up {revoked}, not only the moved"
        changes = [e for e in member.events if e["mono"] > formed and e["event"] == "revoked"]
        assert all(e["owned"] for e in changes), f"{member.name} revoked everything"


def test_survivors_take_over_after_kill_9(kafka_group: KafkaGroup, client: str) -> None:
    g = kafka_group
    members = [g.start(n, client) for n in ("m1", "m2", "m3")]
    g.balanced("m1", "m2", "m3")
    members[0].kill()
    g.balanced("m2", "m3")


def test_a_clean_leave_is_taken_over_at_once(
    kafka_group: KafkaGroup, client: str, request: pytest.FixtureRequest
) -> None:
    if kafka_group.broker.name == "tansu" and client == "aiokafka":
        request.applymarker(pytest.mark.xfail(reason=f"tansu 0.6: {TANSU_AIOKAFKA_LEAVE}"))
    g = kafka_group
    members = [g.start(n, client, session_ms=LONG_SESSION_MS) for n in ("m1", "m2", "m3")]
    g.balanced("m1", "m2", "m3")
    members[0].terminate()
    assert members[0].proc.wait(timeout=WAIT_S) == 0
    assert members[0].last("left") is not None
    g.balanced("m2", "m3", timeout=LONG_SESSION_MS / 1000 - 5)


def _wait_committed_all(g: KafkaGroup, member: Driver, offset: int) -> None:
    """Until ``member`` committed ``offset`` on every partition (kcat does not say when it
    commits: until it read every partition, then its close commits)."""
    if member.client == "kcat":
        g.drivers.wait(
            lambda: len(member.of("consumed")) == PARTITIONS or None, WAIT_S, "m1 read all"
        )
        return

    def done() -> bool | None:
        lines = member.of("committed")
        tps = {(t, p) for e in lines for t, p, o in e["offsets"] if o == offset}
        return len(tps) == PARTITIONS or None

    g.drivers.wait(done, WAIT_S, f"{member.name} committed {offset} on every partition")


def test_a_new_consumer_resumes_from_the_commit(kafka_group: KafkaGroup, client: str) -> None:
    g = kafka_group
    g.produce(5)
    first = g.start("m1", client, commit=True)
    _wait_committed_all(g, first, 5)
    assert first.stop() == 0
    g.produce(5)
    second = g.start("m2", client, commit=True)
    assert g.first_reads(second) == [(p, 5) for p in range(PARTITIONS)]


def test_a_static_member_bounces_without_a_rebalance(kafka_group: KafkaGroup, client: str) -> None:
    if not launch.CLIENTS[client].static:
        pytest.skip(f"{client} has no static membership")
    g = kafka_group
    names = ("m1", "m2", "m3")
    for n in names:
        g.start(n, client, instance_id=f"static-{n}", session_ms=LONG_SESSION_MS)
    g.balanced(*names)
    g.bounce(
        "m1",
        ("m2", "m3"),
        lambda: g.start("m1", client, instance_id="static-m1", session_ms=LONG_SESSION_MS),
    )
