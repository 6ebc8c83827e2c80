"""Assignor scale: Kafka's test of 1,000,000 partitions and 2,000 members.

500 topics of 2,000 partitions, 2,000 members all subscribing to every topic. Times one
``assign`` call of the chosen assignor (``cooperative-sticky`` by default) in five
situations:

- ``first``: nobody owns anything.
- ``second``: the ``first`` result fed back as ownership (generation 1); nothing may move.
- ``leave``: as ``second`` without 20 members; their partitions have no owner any more and
  are spread at once.
- ``join``: as ``second`` plus 20 new members; the old members give up what the new ones
  need (cooperative: revoked now, handed over in the follow-up round).
- ``join follow-up``: the ``join`` result fed back (generation 2); the revoked partitions
  reach the new members.

``--random-subscriptions``: every member subscribes to a random non-empty subset of the
topics instead (seeded), which takes the assignor's path for unequal subscriptions.

Each figure is the median of ``--runs`` calls on the same input (the assignor keeps no
state). Peak memory is the process's maximum resident set (``getrusage``), which only
grows, so it is reported as a running peak after each situation. Every result is checked
outside the timed calls: every partition at most once, assigned or else revoked from its
owner this round; in ``second`` every member keeps exactly what it owned. Run:
``python -m bench.assignors``.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bench.common import quiet_logs
from huddle.client.assignors import ASSIGNORS, Assignor, GroupAssignment, MemberSubscription

Interest = Callable[[str], frozenset[str]]


@dataclass(frozen=True)
class Situation:
    name: str
    subscriptions: dict[str, MemberSubscription]
    moves_nothing: bool  # every member keeps exactly what it owned


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def member_ids(first: int, count: int) -> list[str]:
    return [f"member-{i:05d}" for i in range(first, first + count)]


def owning(
    members: list[str], interest: Interest, previous: GroupAssignment, generation: int
) -> dict[str, MemberSubscription]:
    """Subscriptions of ``members`` that report what ``previous`` gave them."""
    subs = {}
    for member in members:
        had = previous.get(member)
        subs[member] = MemberSubscription(
            member_id=member,
            topics=interest(member),
            owned=had.partitions if had else frozenset(),
            generation=generation if had else -1,
        )
    return subs


def interests(topics: list[str], randomly: bool) -> Interest:
    """member -> its topics: every topic, or a random subset fixed per member. Each
    member gets its own frozenset, as decoding its subscription would make one."""
    chosen: dict[str, frozenset[str]] = {}
    rng = random.Random(429)

    def interest(member: str) -> frozenset[str]:
        if member not in chosen:
            picked = rng.sample(topics, rng.randint(1, len(topics))) if randomly else topics
            chosen[member] = frozenset(sorted(picked))
        return chosen[member]

    return interest


def timed(
    assignor: Assignor,
    partitions: Mapping[str, int],
    subs: Mapping[str, MemberSubscription],
    runs: int,
) -> tuple[float, GroupAssignment]:
    times = []
    result: GroupAssignment = {}
    for _ in range(runs):
        result = {}  # drop the previous result before the next call
        gc.collect()
        start = time.perf_counter()
        result = assignor.assign(partitions, subs)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def check(situation: Situation, total: int, result: GroupAssignment) -> tuple[int, int, int, int]:
    """(assigned, revoked, moved to a new owner, max - min partitions per member)."""
    assigned = sum(len(a.partitions) for a in result.values())
    revoked = sum(len(a.revoked) for a in result.values())
    everything = set().union(*(a.partitions for a in result.values()))
    if len(everything) != assigned or assigned + revoked != total:
        raise AssertionError(f"{situation.name}: {assigned} assigned, {revoked} revoked")
    moved = 0
    for member, a in result.items():
        owned = situation.subscriptions[member].owned
        moved += len(a.partitions - owned)
        if situation.moves_nothing and (a.partitions != owned or a.revoked):
            raise AssertionError(f"{situation.name}: {member} did not keep what it owned")
    counts = [len(a.partitions) for a in result.values()]
    return assigned, revoked, moved, max(counts) - min(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=2000, help="per topic")
    parser.add_argument("--members", type=int, default=2000)
    parser.add_argument("--churn", type=int, default=20, help="members leaving / joining")
    parser.add_argument("--runs", type=int, default=3, help="timed calls per situation")
    parser.add_argument("--assignor", default="cooperative-sticky")
    parser.add_argument("--random-subscriptions", action="store_true")
    args = parser.parse_args()
    quiet_logs()

    assignor = ASSIGNORS.create(args.assignor)
    partitions = {f"topic-{i:04d}": args.partitions for i in range(args.topics)}
    interest = interests(sorted(partitions), args.random_subscriptions)
    total = args.topics * args.partitions
    members = member_ids(0, args.members)
    kind = "random" if args.random_subscriptions else "equal"
    print(
        f"{args.assignor}: {args.topics} topics x {args.partitions} partitions = {total:,}, "
        f"{args.members} members, {kind} subscriptions, median of {args.runs} runs; "
        f"baseline RSS {peak_mib():.0f} MiB"
    )
    print(
        f"{'situation':<16} {'time':>8} {'assigned':>10} {'revoked':>8} {'moved':>10} "
        f"{'spread':>6} {'peak RSS':>9}"
    )

    def report(situation: Situation) -> GroupAssignment:
        seconds, result = timed(assignor, partitions, situation.subscriptions, args.runs)
        assigned, revoked, moved, spread = check(situation, total, result)
        print(
            f"{situation.name:<16} {seconds:>7.2f}s {assigned:>10,} {revoked:>8,} "
            f"{moved:>10,} {spread:>6} {peak_mib():>5.0f} MiB",
            flush=True,
        )
        return result

    first = report(Situation("first", owning(members, interest, {}, 0), False))
    report(Situation("second", owning(members, interest, first, 1), moves_nothing=True))
    every = max(1, args.members // args.churn)
    stay = [m for i, m in enumerate(members) if i % every != 0 or i // every >= args.churn]
    report(Situation("leave", owning(stay, interest, first, 1), False))
    grown = members + member_ids(args.members, args.churn)
    joined = report(Situation("join", owning(grown, interest, first, 1), False))
    report(Situation("join follow-up", owning(grown, interest, joined, 2), False))


if __name__ == "__main__":
    main()
