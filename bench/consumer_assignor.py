"""Server-side assignors of the consumer protocol at scale: 1,000,000 partitions, 2,000 members.

500 topics of 2,000 partitions, 2,000 members all subscribing to every topic (the group's
homogeneous case). Times one ``assign`` call of ``uniform`` and of ``range`` (the
coordinator's assignors, in-process) in four situations:

- ``first``: no previous target.
- ``second``: the ``first`` result fed back as the previous target; nothing may move.
- ``leave``: as ``second`` without 20 members; their partitions go to the others.
- ``join``: as ``second`` plus 20 new members; the old members give up what balance needs.

``--random-subscriptions``: every member subscribes to a random non-empty subset of the
topics instead (seeded), which takes ``uniform``'s general path.

Each figure is the median of ``--runs`` calls on the same input: wall-clock time and the
process's CPU time (the machine is shared: the wall clock counts other jobs too). Every
result is checked outside the timed calls: every subscribed partition assigned exactly
once, the spread (max - min partitions per member), and ``moved``: partitions whose member
changed from the previous target. Run: ``python -m bench.consumer_assignor``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Mapping

from bench.common import cpu_model
from huddle.coordinator.consumer.assignors import ASSIGNORS, MemberSpec, spec_of
from huddle.coordinator.consumer.messages import Assignment

Target = Mapping[str, Assignment]


Interest = Callable[[str], frozenset[str]]


def members(ids: list[str], interest: Interest, previous: Target) -> dict[str, MemberSpec]:
    return {m: MemberSpec(m, interest(m), previous.get(m, {})) for m in ids}


def interests(topics: list[str], randomly: bool) -> Interest:
    """member -> its topics: every topic, or a random non-empty subset fixed per member."""
    everything = frozenset(topics)
    chosen: dict[str, frozenset[str]] = {}
    rng = random.Random(848)

    def interest(member_id: str) -> frozenset[str]:
        if not randomly:
            return everything
        if member_id not in chosen:
            chosen[member_id] = frozenset(rng.sample(topics, rng.randint(1, len(topics))))
        return chosen[member_id]

    return interest


def check(
    result: Target, partitions: Mapping[str, int], previous: Target, interest: Interest
) -> tuple[int, int]:
    """(spread, moved); fails unless every subscribed partition is assigned exactly once."""
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
    subscribed = set().union(*(interest(m) for m in result))
    for topic, count in partitions.items():
        if topic in subscribed:
            assert len(seen[topic]) == count, f"{topic}: {count - len(seen[topic])} unassigned"
    return max(sizes) - min(sizes), moved


def timed(
    name: str, specs: dict[str, MemberSpec], partitions: Mapping[str, int], runs: int
) -> tuple[float, float, Target]:
    assignor = ASSIGNORS[name]
    spec = spec_of(specs, partitions)
    times = []
    cpu = []
    result: Target = {}
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = assignor.assign(spec).assignments
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), statistics.median(cpu), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--members", type=int, default=2000)
    parser.add_argument("--churn", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--assignor", action="append", choices=sorted(ASSIGNORS))
    parser.add_argument(
        "--random-subscriptions",
        action="store_true",
        help="each member subscribes to a random subset of the topics (uniform's general path)",
    )
    args = parser.parse_args()
    names = args.assignor or ["uniform", "range"]
    partitions = {f"topic-{t:04d}": args.partitions for t in range(args.topics)}
    topics = interests(sorted(partitions), args.random_subscriptions)
    ids = [f"member-{i:05d}" for i in range(args.members)]
    total = args.topics * args.partitions
    print(f"CPU: {cpu_model()}")
    print(
        f"{total:,} partitions ({args.topics} topics), {args.members:,} members, "
        f"median of {args.runs}"
    )
    print(f"{'assignor':<9}{'situation':<10}{'time':>8}{'CPU':>8}{'moved':>11}{'spread':>8}")
    for name in names:
        joined = ids + [f"member-{i:05d}" for i in range(args.members, args.members + args.churn)]

        def run(situation: str, who: list[str], before: Target, name: str = name) -> Target:
            wall, cpu, result = timed(name, members(who, topics, before), partitions, args.runs)
            spread, moved = check(result, partitions, before, topics)
            print(f"{name:<9}{situation:<10}{wall:>7.2f}s{cpu:>7.2f}s{moved:>11,}{spread:>8}")
            return result

        first = run("first", ids, {})
        second = run("second", ids, first)
        run("leave", ids[args.churn :], second)
        run("join", joined, second)


if __name__ == "__main__":
    main()
