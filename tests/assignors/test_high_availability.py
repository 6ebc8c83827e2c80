"""The high-availability assignor (KIP-441) on hand-written groups: actives only on
caught-up members, warm-ups and probing rebalances, standbys, stability, fail-over.
Random clusters: test_high_availability_convergence.py."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import huddle.client.assignors.high_availability  # noqa: F401 - registers "high-availability"
from huddle.client.assignors.base import (
    ASSIGNORS,
    GroupAssignment,
    MemberSubscription,
    RebalanceProtocol,
)
from huddle.client.assignors.high_availability import HighAvailabilityAssignor
from huddle.client.leader import assign as leader_assign
from huddle.client.leader import check_cooperative
from huddle.protocol.embedded import TopicPartition
from tests.builders import group, subscription, tps

TOPIC = "t"


def member(
    member_id: str,
    owned: str = "",
    lags: Mapping[str, int] | None = None,
    topics: str = TOPIC,
    generation: int = 1,
) -> MemberSubscription:
    """A member of ``topics`` owning ``owned`` since ``generation`` (no claim if it owns none)."""
    return subscription(member_id, topics.split(), owned, generation if owned else -1, lags=lags)


def caught_up(text: str) -> dict[str, int]:
    """Lag 0 for every task in ``text``."""
    return dict.fromkeys(text.split(), 0)


def feed_back(
    subs: Mapping[str, MemberSubscription], result: GroupAssignment, generation: int
) -> dict[str, MemberSubscription]:
    """The next round as cooperative members would join it: owning what they were given,
    with everything they hold (active, standby, warm-up) reported caught up."""
    nxt = {}
    for member_id, sub in subs.items():
        got = result[member_id]
        lags = dict(sub.lags)
        lags.update(dict.fromkeys(got.partitions | got.standby | got.warmup, 0))
        nxt[member_id] = MemberSubscription(
            member_id=member_id,
            topics=sub.topics,
            owned=got.partitions,
            generation=generation,
            lags=lags,
        )
    return nxt


def actives(result: GroupAssignment) -> dict[str, frozenset[TopicPartition]]:
    return {member_id: a.partitions for member_id, a in result.items()}


FOUR_STATEFUL = member("a", owned="t-0 t-1 t-2 t-3", lags=caught_up("t-0 t-1 t-2 t-3"))


# --- construction ---------------------------------------------------------------------------


def test_created_by_name_with_kafka_streams_defaults() -> None:
    assignor = ASSIGNORS.create("high-availability")
    assert isinstance(assignor, HighAvailabilityAssignor)
    assert assignor.supported_protocols == (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)
    assert assignor.acceptable_recovery_lag == 10_000
    assert assignor.num_standby_replicas == 0
    assert assignor.max_warmup_replicas == 2
    assert assignor.probing_rebalance_interval_ms == 600_000


@pytest.mark.parametrize(
    "settings",
    [
        {"max_warmup_replicas": 0},
        {"num_standby_replicas": -1},
        {"acceptable_recovery_lag": -1},
        {"probing_rebalance_interval_ms": 0},
    ],
)
def test_rejects_settings_that_could_never_converge(settings: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(settings))):
        HighAvailabilityAssignor(**settings)


def test_no_members_no_assignment() -> None:
    assert HighAvailabilityAssignor().assign({TOPIC: 3}, {}) == {}


# --- actives on caught-up members, warm-ups, probing -----------------------------------------


def test_actives_only_go_to_caught_up_members_even_if_unbalanced() -> None:
    subs = group(
        member("a", lags={"t-0": 0, "t-1": 9_000}),
        member("b", lags={"t-0": 50_000, "t-1": 50_000}),
    )
    result = HighAvailabilityAssignor().assign({TOPIC: 2}, subs)
    assert actives(result) == {"a": tps("t-0 t-1"), "b": frozenset()}
    assert result["b"].warmup == tps("t-0") or result["b"].warmup == tps("t-1")


def test_a_new_empty_member_warms_up_stateful_tasks_instead_of_running_them() -> None:
    subs = group(FOUR_STATEFUL, member("b"))
    result = HighAvailabilityAssignor().assign({TOPIC: 4}, subs)
    assert actives(result) == {"a": tps("t-0 t-1 t-2 t-3"), "b": frozenset()}
    assert len(result["b"].warmup) == 2
    assert result["a"].revoked == frozenset()
    assert {a.scheduled_rebalance_delay_ms for a in result.values()} == {600_000}


def test_a_new_empty_member_gets_stateless_tasks_at_once_and_warms_up_its_stateful_share() -> None:
    """Each topic is spread over the members (subtopology balance): b takes its share of
    stateless u at once, and warms up its share of stateful t before a probing rebalance
    hands it over."""
    subs = group(member("a", lags=caught_up("t-0 t-1")), member("b"))
    result = HighAvailabilityAssignor().assign({TOPIC: 2, "u": 2}, _subscribe_all(subs, "t u"))
    assert result["a"].partitions == tps("t-0 t-1 u-0")
    assert result["b"].partitions == tps("u-1")
    assert result["b"].warmup == tps("t-1")
    assert {a.scheduled_rebalance_delay_ms for a in result.values()} == {600_000}


def test_each_topic_is_spread_over_the_members() -> None:
    """KIP-441's subtopology balance: a running all of x and b all of y is balanced per
    member but not per topic; the tasks move (stateless here: at once, cooperatively)."""
    subs = group(member("a", owned="x-0 x-1"), member("b", owned="y-0 y-1"))
    both = _subscribe_all(subs, "x y")
    first = HighAvailabilityAssignor().assign({"x": 2, "y": 2}, both)
    check_cooperative(both, first)
    assert len(first["a"].revoked) == len(first["b"].revoked) == 1
    lenient = HighAvailabilityAssignor(balance_factor=2).assign({"x": 2, "y": 2}, both)
    assert {m: a.partitions for m, a in lenient.items()} == {  # within the factor: kept
        "a": tps("x-0 x-1"),
        "b": tps("y-0 y-1"),
    }
    with pytest.raises(ValueError, match="balance_factor"):
        HighAvailabilityAssignor(balance_factor=0)


def test_stateless_tasks_move_cooperatively_without_warm_ups() -> None:
    subs = group(member("a", owned="t-0 t-1 t-2 t-3"), member("b"))
    assignor = HighAvailabilityAssignor()
    first = assignor.assign({TOPIC: 4}, subs)
    check_cooperative(subs, first)
    assert len(first["a"].revoked) == 2
    assert first["b"].partitions == frozenset()
    assert all(not a.warmup and not a.scheduled_rebalance_delay_ms for a in first.values())
    follow_up = assignor.assign({TOPIC: 4}, _owning(subs, first))
    assert follow_up["b"].partitions == first["a"].revoked


def test_at_most_max_warmup_replicas_warm_ups_in_a_round() -> None:
    tasks = " ".join(f"t-{p}" for p in range(12))
    subs = group(member("a", owned=tasks, lags=caught_up(tasks)), member("b"), member("c"))
    result = HighAvailabilityAssignor(max_warmup_replicas=3).assign({TOPIC: 12}, subs)
    assert sum(len(a.warmup) for a in result.values()) == 3
    assert result["a"].partitions == tps(tasks)


def test_probing_rebalance_delay_is_the_configured_interval() -> None:
    subs = group(FOUR_STATEFUL, member("b"))
    result = HighAvailabilityAssignor(probing_rebalance_interval_ms=1_234).assign({TOPIC: 4}, subs)
    assert {a.scheduled_rebalance_delay_ms for a in result.values()} == {1_234}


def test_once_warm_the_probing_round_moves_the_active_revoking_first() -> None:
    assignor = HighAvailabilityAssignor()
    subs = group(FOUR_STATEFUL, member("b"))
    warming = assignor.assign({TOPIC: 4}, subs)
    warm = warming["b"].warmup
    assert len(warm) == 2

    probing = feed_back(subs, warming, generation=2)  # b reports lag 0 on its warm-ups
    revoking = assignor.assign({TOPIC: 4}, probing)
    check_cooperative(probing, revoking)
    assert revoking["a"].revoked == warm
    assert revoking["b"].partitions == frozenset()  # withheld until a has let go
    assert all(not a.warmup and not a.scheduled_rebalance_delay_ms for a in revoking.values())

    follow_up = feed_back(probing, revoking, generation=3)
    handed_over = assignor.assign({TOPIC: 4}, follow_up)
    check_cooperative(follow_up, handed_over)
    assert handed_over["b"].partitions == warm
    assert handed_over["a"].partitions == tps("t-0 t-1 t-2 t-3") - warm
    assert all(not a.revoked and not a.warmup for a in handed_over.values())


def test_a_warm_up_still_behind_keeps_warming() -> None:
    assignor = HighAvailabilityAssignor()
    subs = group(FOUR_STATEFUL, member("b"))
    warming = assignor.assign({TOPIC: 4}, subs)
    behind = {str_tp(tp): 30_000 for tp in warming["b"].warmup}
    probing = group(FOUR_STATEFUL, member("b", lags=behind))
    again = assignor.assign({TOPIC: 4}, probing)
    assert again["b"].warmup == warming["b"].warmup
    assert again["a"].partitions == tps("t-0 t-1 t-2 t-3")
    assert {a.scheduled_rebalance_delay_ms for a in again.values()} == {600_000}


def test_a_task_nobody_is_caught_up_on_goes_to_the_least_lagging_member() -> None:
    subs = group(
        member("a", lags={"t-0": 50_000}),
        member("b", lags={"t-0": 20_000}),
        member("c"),
    )
    result = HighAvailabilityAssignor().assign({TOPIC: 1}, subs)
    assert actives(result) == {"a": frozenset(), "b": tps("t-0"), "c": frozenset()}


def test_eager_members_stay_on_the_tasks_they_are_caught_up_on() -> None:
    """Eager members report nothing owned; their lags alone keep the actives in place."""
    subs = group(
        member("a", lags=caught_up("t-0 t-2")),
        member("b", lags=caught_up("t-1 t-3")),
    )
    result = HighAvailabilityAssignor().assign({TOPIC: 4}, subs)
    assert actives(result) == {"a": tps("t-0 t-2"), "b": tps("t-1 t-3")}


def test_only_tasks_of_subscribed_topics() -> None:
    subs = group(
        member("a", topics="t", lags=caught_up("t-0")),
        member("b", topics="t u"),
    )
    result = HighAvailabilityAssignor().assign({"t": 2, "u": 2}, subs)
    assert result["a"].partitions <= tps("t-0 t-1")
    assert result["a"].partitions | result["b"].partitions == tps("t-0 t-1 u-0 u-1")


# --- standbys ----------------------------------------------------------------------------------


def test_standbys_on_distinct_members_never_with_the_active() -> None:
    tasks = " ".join(f"t-{p}" for p in range(6))
    subs = group(*(member(m, lags=caught_up(tasks)) for m in "abcd"))
    result = HighAvailabilityAssignor(num_standby_replicas=2).assign({TOPIC: 6}, subs)
    for tp in tps(tasks):
        holders = [m for m, a in result.items() if tp in a.standby]
        assert len(holders) == 2
        assert all(tp not in result[m].partitions for m in holders)
    assert all(not (a.partitions & a.standby) for a in result.values())


def test_standbys_prefer_the_members_with_local_state() -> None:
    subs = group(
        member("a", owned="t-0", lags=caught_up("t-0")),
        member("b"),
        member("c", lags={"t-0": 400}),
    )
    result = HighAvailabilityAssignor(num_standby_replicas=1).assign({TOPIC: 1}, subs)
    assert result["c"].standby == tps("t-0")
    assert result["b"].standby == frozenset()


def test_a_fresh_group_gets_its_standbys_at_once() -> None:
    """Nobody has state yet, so nobody reports a lag: every task still gets its standbys
    (a balanced result schedules no probing rebalance that could add them later)."""
    tasks = tps(" ".join(f"t-{p}" for p in range(6)))
    subs = group(*(member(m) for m in "abc"))
    result = HighAvailabilityAssignor(num_standby_replicas=1).assign({TOPIC: 6}, subs)
    for tp in tasks:
        holders = [m for m, a in result.items() if tp in a.standby]
        assert len(holders) == 1
        assert tp not in result[holders[0]].partitions
    assert sorted(len(a.standby) for a in result.values()) == [2, 2, 2]
    lone = HighAvailabilityAssignor(num_standby_replicas=1).assign({TOPIC: 6}, group(member("a")))
    assert lone["a"].standby == frozenset()  # no other member to keep one


def test_more_standbys_than_members_allow() -> None:
    subs = group(member("a", owned="t-0", lags=caught_up("t-0")), member("b"))
    result = HighAvailabilityAssignor(num_standby_replicas=2).assign({TOPIC: 1}, subs)
    assert result["b"].standby == tps("t-0")
    assert result["a"].standby == frozenset()


# --- stability and fail-over ---------------------------------------------------------------------


def test_a_balanced_assignment_fed_back_comes_back_unchanged() -> None:
    lags = caught_up("t-0 t-1 t-2 t-3 t-4")
    subs = group(
        member("a", owned="t-0 t-3", lags=lags),
        member("b", owned="t-1 t-4", lags=lags),
        member("c", owned="t-2", lags=lags),
    )
    assignor = HighAvailabilityAssignor(num_standby_replicas=1)
    first = assignor.assign({TOPIC: 5}, subs)
    assert actives(first) == {m: s.owned for m, s in subs.items()}
    assert all(not a.revoked and not a.warmup for a in first.values())
    assert {a.scheduled_rebalance_delay_ms for a in first.values()} == {0}
    assert assignor.assign({TOPIC: 5}, feed_back(subs, first, generation=2)) == first


def test_a_departed_members_tasks_go_to_its_caught_up_standbys() -> None:
    """a leaves as d joins: a's tasks go where their standbys are, not to the empty d."""
    subs = group(
        member("b", owned="t-2 t-3", lags={"t-2": 0, "t-3": 0, "t-0": 120}),
        member("c", owned="t-4 t-5", lags={"t-4": 0, "t-5": 0, "t-1": 80}),
        member("d"),
    )
    result = HighAvailabilityAssignor(num_standby_replicas=1).assign({TOPIC: 6}, subs)
    assert result["b"].partitions == tps("t-0 t-2 t-3")
    assert result["c"].partitions == tps("t-1 t-4 t-5")
    assert result["d"].partitions == frozenset()
    assert len(result["d"].warmup) == 2
    assert {a.scheduled_rebalance_delay_ms for a in result.values()} == {600_000}


def test_a_stale_claim_is_revoked_but_the_rightful_owner_keeps_its_task() -> None:
    subs = group(
        member("a", owned="t-0", lags=caught_up("t-0"), generation=5),
        member("b", owned="t-0 t-1", lags=caught_up("t-0 t-1"), generation=3),
    )
    result = HighAvailabilityAssignor().assign({TOPIC: 2}, subs)
    check_cooperative(subs, result)
    assert result["a"].partitions == tps("t-0")
    assert result["b"].partitions == tps("t-1")
    assert result["b"].revoked == tps("t-0")


# --- helpers for the tests above ---------------------------------------------------------------


def str_tp(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _subscribe_all(
    subs: Mapping[str, MemberSubscription], topics: str
) -> dict[str, MemberSubscription]:
    return {
        m: MemberSubscription(
            member_id=s.member_id,
            topics=frozenset(topics.split()),
            owned=s.owned,
            generation=s.generation,
            lags=s.lags,
        )
        for m, s in subs.items()
    }


def _owning(
    subs: Mapping[str, MemberSubscription], result: GroupAssignment
) -> dict[str, MemberSubscription]:
    """The next round with ownership fed back and the lags left as they were."""
    return {
        m: MemberSubscription(
            member_id=m, topics=s.topics, owned=result[m].partitions, generation=2, lags=s.lags
        )
        for m, s in subs.items()
    }


def test_the_leader_accepts_and_encodes_a_warming_round() -> None:
    subs = group(FOUR_STATEFUL, member("b"))
    encoded = leader_assign(HighAvailabilityAssignor(), {TOPIC: 4}, subs)
    assert set(encoded) == {"a", "b"}
