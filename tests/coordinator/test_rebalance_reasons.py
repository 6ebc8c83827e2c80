"""The reasons a rebalance starts for, as ``huddle_rebalances_total{reason}`` labels them
(the text before its first ':'): a short fixed phrase each, all listed in the README, never
a number or a member id (each would be a new time series)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from huddle.coordinator.metrics import CoordinatorMetrics
from huddle.protocol.messages import CreateTopicsRequest, TopicSpec
from tests.harness import FAST, SESSION_MS, Driver

README = Path(__file__).resolve().parents[2] / "README.md"


def new_member_joined(d: Driver) -> None:
    d.form(1)


def leader_rejoined(d: Driver) -> None:
    (a,) = d.form(1)
    d.join(1, a)


def metadata_changed(d: Driver) -> None:
    a, b = d.form(1, 2)
    follower, conn = (b, 2) if d.group().leader == a else (a, 1)
    d.join(conn, follower, metadata=b"more topics")


def member_left(d: Driver) -> None:
    a, _ = d.form(1, 2)
    d.leave(1, a)


def static_member_rejoined(d: Driver) -> None:
    cid = d.join(1, instance="s1")
    d.sync_all({1: d.join_response(cid).member_id}, [cid])
    d.send(9, CreateTopicsRequest(topics=[TopicSpec(name="new", partitions=1)]))
    d.join(2, instance="s1")  # restarted, after a topic changed: it must be told


def members_did_not_sync_in_time(d: Driver) -> None:
    members = dict(zip((1, 2), d.form(1, 2), strict=True))
    (conn,) = [c for c, m in members.items() if m == d.group().leader]
    # the leader's join starts a rebalance; a sync phase shorter than a session
    joins = [d.join(c, m, rebalance_ms=SESSION_MS // 2) for c, m in members.items()]
    gen = d.join_response(joins[0]).generation_id
    d.sync(conn, members[conn], gen, {m: b"" for m in members.values()})  # Stable again
    d.advance(SESSION_MS // 2 + 1)  # the follower never synced


def loaded_over_the_size_limit(d: Driver) -> None:
    old = Driver()
    old.core.keep_groups()
    old.form(1, 2, 3)
    d.core.load(old.core.take_changes(), d.now)  # d allows two members a group


SCENARIOS: list[tuple[Callable[[Driver], None], dict[str, Any]]] = [
    (new_member_joined, {}),
    (leader_rejoined, {}),
    (metadata_changed, {}),
    (member_left, {}),
    (static_member_rejoined, {}),
    (members_did_not_sync_in_time, {}),
    (loaded_over_the_size_limit, {"max_group_size": 2}),
]


def reasons(scenario: Callable[[Driver], None], overrides: dict[str, Any]) -> set[str]:
    """The reason labels of the rebalances ``scenario`` starts."""
    d = Driver(replace(FAST, **overrides))
    metrics = CoordinatorMetrics()
    d.core.observe_rebalances(metrics)
    scenario(d)
    (family,) = [f for f in metrics.collect() if f.name == "huddle_rebalances"]
    return {s.labels["reason"] for s in family.samples if s.name == "huddle_rebalances_total"}


def test_every_rebalance_reason_is_a_short_phrase_the_readme_lists() -> None:
    (row,) = [line for line in README.read_text().splitlines() if "huddle_rebalances_total" in line]
    listed = set(re.findall(r"`([^`{]+)`", row.split("|")[2]))
    seen: set[str] = set()
    for scenario, overrides in SCENARIOS:
        labels = reasons(scenario, overrides)
        assert scenario.__name__.replace("_", " ") in labels, (scenario.__name__, labels)
        seen |= labels
    assert not [reason for reason in seen if re.search(r"\d", reason)]
    assert seen <= listed, seen - listed
