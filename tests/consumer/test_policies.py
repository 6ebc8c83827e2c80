"""huddle's own policies as server assignors of the consumer protocol, driven through the core
with an explicit clock: ``deferred`` (Design II, a departed member's partitions held for its
return) and ``paced`` (Design III, moves in batches)."""

from __future__ import annotations

from huddle.coordinator.consumer import (
    ConsumerCoordinator,
    ConsumerGroupConfig,
    HeartbeatRequest,
    TopicView,
)
from huddle.coordinator.consumer.assignors import DeferredAssignor, PacedAssignor, UniformAssignor
from huddle.protocol.errors import ErrorCode
from tests.consumer.helpers import GROUP, Client, flat

VIEW = TopicView({"a": 6})
ALL = {("a", p) for p in range(6)}


def with_assignor(
    name: str, assignor: object, session_timeout_ms: int = 60_000
) -> ConsumerCoordinator:
    return ConsumerCoordinator(
        ConsumerGroupConfig(session_timeout_ms=session_timeout_ms, assignors=(name, "uniform")),
        {name: assignor, "uniform": UniformAssignor()},  # type: ignore[dict-item]
    )


def settle(core: ConsumerCoordinator, clients: list[Client], start: float) -> float:
    now = start
    for _ in range(6):
        for client in clients:
            assert client.heartbeat(core, now, VIEW).error is ErrorCode.NONE
            now += 1
    return now


def test_deferred_holds_a_departed_member_s_partitions_for_a_newcomer() -> None:
    core = with_assignor("deferred", DeferredAssignor(hold_ms=10_000))
    m1, m2 = Client("m1", ("a",)), Client("m2", ("a",))
    now = settle(core, [m1, m2], 0)
    m1_had, m2_had = flat(m1.owned), flat(m2.owned)
    assert m1_had | m2_had == ALL
    core.heartbeat(HeartbeatRequest(GROUP, "m2", -1), now, VIEW)

    now = settle(core, [m1], now)
    assert flat(m1.owned) == m1_had  # m2's partitions go to nobody while they are held
    m3 = Client("m3", ("a",))  # m2's process, back under a new id
    now = settle(core, [m1, m3], now)
    assert flat(m1.owned) == m1_had  # nothing of m1's moved
    assert flat(m3.owned) == m2_had


def test_deferred_gives_held_partitions_to_everyone_when_the_hold_runs_out() -> None:
    core = with_assignor("deferred", DeferredAssignor(hold_ms=10_000))
    m1, m2 = Client("m1", ("a",)), Client("m2", ("a",))
    now = settle(core, [m1, m2], 0)
    left_at = now
    core.heartbeat(HeartbeatRequest(GROUP, "m2", -1), left_at, VIEW)
    now = settle(core, [m1], now)
    assert len(flat(m1.owned)) == 3
    assert core.expire(left_at + 9_999) == []
    assert core.expire(left_at + 10_000) == []  # the group epoch moves: a new target
    settle(core, [m1], left_at + 10_000)
    assert flat(m1.owned) == ALL


def test_deferred_gives_a_static_member_back_what_it_had_after_its_session_ended() -> None:
    core = with_assignor("deferred", DeferredAssignor(hold_ms=30_000), session_timeout_ms=5_000)
    s1, m2 = Client("s1", ("a",), instance_id="i1"), Client("m2", ("a",))
    now = settle(core, [s1, m2], 0)
    s1_had, m2_had = flat(s1.owned), flat(m2.owned)
    for _ in range(12):  # s1 is gone without a word; m2 keeps heartbeating
        now += 500
        m2.heartbeat(core, now, VIEW)
        core.expire(now)
    assert "s1" not in core.groups[GROUP].members
    assert flat(m2.owned) == m2_had
    back = Client("s1b", ("a",), instance_id="i1")  # its instance id, a new member id
    settle(core, [back, m2], now)
    assert flat(back.owned) == s1_had
    assert flat(m2.owned) == m2_had


def test_paced_moves_at_most_its_batch_per_target() -> None:
    core = with_assignor("paced", PacedAssignor(max_moves=1, pause_ms=1_000))
    m1 = Client("m1", ("a",))
    now = settle(core, [m1], 0)
    assert flat(m1.owned) == ALL
    m2 = Client("m2", ("a",))
    now = settle(core, [m1, m2], now)
    assert len(flat(m2.owned)) == 1  # one of the three it should get
    batches = [len(flat(m2.owned))]
    for _ in range(3):
        now += 1_000
        core.expire(now)
        now = settle(core, [m1, m2], now)
        batches.append(len(flat(m2.owned)))
    assert batches == [1, 2, 3, 3]
    assert flat(m1.owned) | flat(m2.owned) == ALL
