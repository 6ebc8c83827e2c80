"""The fault campaign, bounded for ``make test`` (about 80 s of real processes, so not in
the fast tier): three ``huddle serve --cluster`` nodes on one etcd (lease TTL 2 s, 6 shards),
three cooperative members (and, shorter, three consumer-protocol members) committing every
200 ms, and faults one at a time, each healed:
etcd frozen, killed and started again, the group's owner frozen past its lease, its links to
etcd and to its clients blackholed or reset (calls in flight), its connections to etcd
dropping what it sends, a member frozen. After every heal, every shard is served again
within the lease TTL and a few seconds of etcd answering. ``huddle chaos run etcd-faults``
runs the long one."""

from __future__ import annotations

from pathlib import Path

import pytest

from huddle.chaos import events as ev
from huddle.chaos.cluster import HEALS, SERVED_SLACK_S
from huddle.chaos.eventfiles import read_events
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.procs import pid_alive
from huddle.chaos.scenarios import CLUSTER_LEASE_S, ETCD_FAULTS, Scenario, etcd_fault_steps
from tests.etcd import require_etcd

FAULTS = 24  # each kind three times
GAP_S = 1.5  # from a heal to the next fault


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("protocol", "faults"),
    # huddle's consumer-protocol members (KIP-848): each kind of fault once
    [("cooperative-sticky", FAULTS), ("consumer", len(ETCD_FAULTS))],
)
def test_every_shard_is_served_again_after_every_fault(
    tmp_path: Path, protocol: str, faults: int
) -> None:
    require_etcd()
    steps = etcd_fault_steps(7, 3, GAP_S, count=faults)
    scenario = Scenario("etcd-faults", "the bounded campaign", steps, extra={"shards": 6})
    settings = RunSettings(
        run_dir=tmp_path,
        protocol=protocol,
        members=3,
        partitions=6,
        duration=max(s.at for s in steps) + 1.0,
        commit_interval_ms=200,
        session_timeout_ms=10_000,
    )
    lines: list[str] = []
    result = run(settings, scenario, lines.append)

    assert result.outcome == "completed", lines[-30:]
    assert not [pid for pid in result.pids if pid_alive(pid)], "every child is gone"
    chaos = read_events(tmp_path / "events" / "chaos.jsonl")
    applied = [r["action"] for r in chaos if r["event"] == ev.FAULT]
    assert applied == [s.action for s in sorted(steps, key=lambda s: s.at)], lines[-30:]
    served = [r for r in chaos if r["event"] == ev.SHARDS_SERVED]
    assert [r["after"] for r in served] == [a for a in applied if a in HEALS]
    for r in served:  # every time
        assert r["answering_s"] is not None, r
        assert r["served_s"] is not None, r
        assert r["served_s"] <= CLUSTER_LEASE_S + SERVED_SLACK_S, r
    # the group goes on: commits acknowledged after the last heal
    last_heal = served[-1]["ts"]
    committed = [
        r
        for name in ("member-1", "member-2", "member-3")
        for r in read_events(tmp_path / "events" / f"{name}.jsonl")
        if r["event"] == ev.COMMITTED and r["accepted"] and r["ts"] > last_heal
    ]
    assert committed, "no commit acknowledged after the last heal"
