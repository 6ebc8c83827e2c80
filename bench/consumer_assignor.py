"""Server-side assignors of the consumer protocol at scale: 1,000,000 partitions, 2,000 members.

500 topics of 2,000 partitions, 2,000 members all subscribing to every topic (the group's
homogeneous case). Times one ``assign`` call of ``uniform`` and of ``range`` (the
coordinator's assignors, in-process) in four situations:

- ``first``: no previous target.
- ``second``: the ``first`` result fed back as the previous target; nothing may move.
- ``leave``: as ``second`` without 20 members; their partitions go to the others.
- ``join``: as ``second`` plus 20 new members; the old members give up what balance needs.

Each figure is the median of ``--runs`` calls on the same input. Every result is checked
outside the timed calls: every partition assigned exactly once, the spread (max - min
partitions per member), and ``moved``: partitions whose member changed from the previous
target. Run: ``python -m bench.consumer_assignor``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping

from bench.common import cpu_model
from huddle.coordinator.consumer.assignors import ASSIGNORS, MemberSpec, spec_of
from huddle.coordinator.consumer.messages import Assignment

Target = Mapping[str, Assignment]


def members(ids: list[str], topics: frozenset[str], previous: Target) -> dict[str, MemberSpec]:
    return {m: MemberSpec(m, topics, previous.get(m, {})) for m in ids}


def check(result: Target, partitions: Mapping[str, int], previous: Target) -> tuple[int, int]:
    """(spread, moved); fails unless every partition is assigned exactly once."""
    seen: dict[str, set[int]] = {t: set() for t in partitions}
    before: dict[tuple[str, int], str] = {}
    for member_id, assignment in previous.items():
        for topic, ps in assignment.items():
            for p in ps:
                before[topic, p] = member_id
    moved = 0
    sizes = []
    for member_id, assignment in result.items():
        size = 0
        for topic, ps in assignment.items():
            assert seen[topic].isdisjoint(ps), f"{topic} assigned twice"
            seen[topic].update(ps)
            size += len(ps)
            moved += sum(1 for p in ps if before.get((topic, p)) != member_id)
        sizes.append(size)
    for topic, count in partitions.items():
        assert len(seen[topic]) == count, f"{topic}: {count - len(seen[topic])} unassigned"
    return max(sizes) - min(sizes), moved


def timed(
    name: str, specs: dict[str, MemberSpec], partitions: Mapping[str, int], runs: int
) -> tuple[float, Target]:
    assignor = ASSIGNORS[name]
    spec = spec_of(specs, partitions)
    times = []
    result: Target = {}
    for _ in range(runs):
        start = time.perf_counter()
        result = assignor.assign(spec).assignments
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--members", type=int, default=2000)
    parser.add_argument("--churn", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--assignor", action="append", choices=sorted(ASSIGNORS))
    args = parser.parse_args()
    names = args.assignor or ["uniform", "range"]
    partitions = {f"topic-{t:04d}": args.partitions for t in range(args.topics)}
    topics = frozenset(partitions)
    ids = [f"member-{i:05d}" for i in range(args.members)]
    total = args.topics * args.partitions
    print(f"CPU: {cpu_model()}")
    print(
        f"{total:,} partitions ({args.topics} topics), {args.members:,} members, "
        f"median of {args.runs}"
    )
    print(f"{'assignor':<9}{'situation':<10}{'time':>8}{'moved':>11}{'spread':>8}")
    for name in names:
        first_time, first = timed(name, members(ids, topics, {}), partitions, args.runs)
        rows: list[tuple[str, float, Target, Target]] = [("first", first_time, first, {})]
        second_time, second = timed(name, members(ids, topics, first), partitions, args.runs)
        rows.append(("second", second_time, second, first))
        staying = ids[args.churn :]
        leave_time, left = timed(name, members(staying, topics, second), partitions, args.runs)
        rows.append(("leave", leave_time, left, second))
        joined = ids + [f"member-{i:05d}" for i in range(args.members, args.members + args.churn)]
        join_time, join = timed(name, members(joined, topics, second), partitions, args.runs)
        rows.append(("join", join_time, join, second))
        for situation, seconds, result, previous in rows:
            spread, moved = check(result, partitions, previous)
            print(f"{name:<9}{situation:<10}{seconds:>7.2f}s{moved:>11,}{spread:>8}")


if __name__ == "__main__":
    main()
