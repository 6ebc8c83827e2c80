"""What a comparison's figures mean, in sentences generated from them.

Runs are compared within a *situation*: the same faults (``static-bounce`` is
``rolling-bounce``'s bounces with static members, so it counts as one), the same kind of
member and the same number of partitions. Within one, each run gets one sentence from its
own numbers and its rank among the others: how many partitions changed owner (and went
back to the member that had them), how much state it restored, and how long processing
stopped, split into *unowned* (no member had the partition: it was being moved, or held
for a member that was away) and *restoring* (its new owner was rebuilding its state).

``DESIGN_CLAIMS`` says where each protocol's design says it should win. A claim is checked
against the runs present, and a claim that did not hold is said so, with the measured
reason (``verdicts``): a protocol that loses where it should win is a finding. A claim is
about protocols, whoever the members are: among Kafka consumers (one client per
situation) ``consumer``, KIP-848's protocol, is checked against the same client's
``range`` and ``cooperative-sticky``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from huddle.pipeline.summary import RunSummary

# scenarios that apply another's faults to a different kind of member
SAME_FAULTS: Final = {"static-bounce": "rolling-bounce"}
STATIC: Final = " (static members)"


@dataclass(frozen=True, slots=True)
class Point:
    """One run as the comparison sees it (None: not measured in this summary)."""

    name: str  # the protocol, and what else tells it apart (static members, a Kafka client)
    situation: str
    moved: int | None
    returned: int | None
    records_restored: int | None
    restore_seconds: float | None
    unowned: float | None
    restoring: float | None
    stopped: float | None
    restores: int | None = None  # restores with state to rebuild
    restores_cut: int | None = None  # of them, cut short before they finished
    kind: str = ""  # ``name`` before runs of one kind were told apart ("": ``name``)
    held: float | None = None  # of ``unowned``, held for a member that went away and came back
    design: str = ""  # the protocol without its client's tag ("": ``kind`` or ``name``)

    @property
    def protocol(self) -> str:
        """What the design claims are about: the name without its run's tag or its
        members' client (a situation has members of one client only)."""
        return self.design or self.kind or self.name


def point(s: RunSummary) -> Point:
    scenario = s.scenario or "unknown scenario"
    design = s.protocol or s.run
    if scenario in SAME_FAULTS:
        design += STATIC
        scenario = SAME_FAULTS[scenario]
    name = design
    situation = f"{scenario}, {s.partitions} partitions"
    if s.client not in (None, "huddle"):
        name = f"{design} ({s.client})"
        situation += f", {s.client} members"
    # a summary written before the moves were counted has none of these
    counted = s.unowned_partition_seconds is not None
    stopped = s.stopped_partition_seconds
    return Point(
        name=name,
        situation=situation,
        moved=s.partitions_moved if counted else None,
        returned=s.partitions_returned if counted else None,
        records_restored=s.records_restored if counted else None,
        restore_seconds=s.restore_seconds,
        restores=s.restores if counted else None,
        restores_cut=s.restores_cut if counted else None,
        unowned=s.unowned_partition_seconds,
        restoring=s.restoring_partition_seconds,
        stopped=s.total_unavailable_partition_seconds if stopped is None else stopped,
        held=s.held_partition_seconds,
        design=design,
    )


def situations(summaries: Sequence[RunSummary]) -> dict[str, list[Point]]:
    """The runs by situation, in the order they first appear; runs of one protocol in one
    situation are told apart by their run's name."""
    groups: dict[str, list[tuple[str, Point]]] = {}
    for s in summaries:
        p = point(s)
        groups.setdefault(p.situation, []).append((s.run, p))
    told_apart = {}
    for situation, runs in groups.items():
        names = [p.name for _, p in runs]
        told_apart[situation] = [
            p if names.count(p.name) == 1 else replace(p, name=f"{p.name} [{run}]", kind=p.name)
            for run, p in runs
        ]
    return told_apart


def tradeoff(points: Sequence[Point]) -> tuple[list[tuple[str, int, float]], list[str]]:
    """The chart's data for one situation: (name, partitions moved, stopped
    partition-seconds) per run with both measured, and the names of the runs without."""
    drawn = [(p.name, p.moved, p.stopped) for p in points]
    return (
        [(n, m, s) for n, m, s in drawn if m is not None and s is not None],
        [n for n, m, s in drawn if m is None or s is None],
    )


# --- sentences ------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:,.1f}"


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _standing(
    p: Point, points: Sequence[Point], key: Callable[[Point], float | None]
) -> tuple[str | None, list[str]]:
    """Where ``p`` stands on ``key``: "least", "most", "same" (every run alike) or None
    (in between, or nothing to compare with), and the other runs that share its place."""
    value = key(p)
    known = [(q, v) for q in points if (v := key(q)) is not None]
    if value is None or len(known) < 2:
        return None, []
    values = [v for _, v in known]
    if min(values) == max(values):
        return "same", []
    for place, bound in (("least", min(values)), ("most", max(values))):
        if value == bound:
            return place, [q.name for q, v in known if v == bound and q is not p]
    return None, []


def _shared(word: str, others: Sequence[str]) -> str:
    return word + (f", as {_names(others)}" if others else "")


def _handed(count: int, where: str) -> str:
    """``count`` handovers of partitions ``where``: a count of handovers, not of distinct
    partitions (one partition may move several times)."""
    if count == 0:
        return f"handed no partition {where}"
    if count == 1:
        return f"handed a partition {where} once"
    return f"handed partitions {where} {count:,} times"


def _restores(p: Point) -> str:
    if not p.records_restored:
        if p.records_restored is None:
            return ""
        if p.restores:  # state to rebuild, but every restore was cut before a record
            started = "a restore" if p.restores == 1 else f"{p.restores:,} restores"
            cut = "it" if p.restores == 1 else f"{p.restores_cut or 0:,} of them"
            return f"started {started} and cut {cut} short before a record of state was replayed"
        return "restored no state"
    rebuilt = [] if p.restore_seconds is None else [f"{_num(p.restore_seconds)} s rebuilding"]
    if p.restores_cut:
        rebuilt.append(f"{p.restores_cut:,} of its {p.restores or 0:,} restores cut short")
    detail = f" ({'; '.join(rebuilt)})" if rebuilt else ""
    return f"restored {p.records_restored:,} records of state{detail}"


def _moves(p: Point, points: Sequence[Point]) -> str:
    if p.moved is None:
        return "has no count of moved partitions in its report"
    place, others = _standing(p, points, lambda q: q.moved)
    text = _handed(p.moved, "to another member")
    if place == "least":
        text += f" ({_shared('the fewest', others)})"
    elif place == "most":
        text += f" ({_shared('the most', others)})"
    elif place == "same":
        text += " (as every other run)"
    more = []
    if p.returned:
        last = "it" if p.returned == 1 else "them"
        more.append(_handed(p.returned, f"back to the member that had {last} last"))
    if restored := _restores(p):
        more.append(restored)
    if len(more) == 2:
        return f"{text}, {more[0]}, and {more[1]}"
    return f"{text} and {more[0]}" if more else text


def _stops(p: Point, points: Sequence[Point]) -> str:
    if p.stopped is None:
        return "its stopped time was not measured"
    text = f"processing stopped for {_num(p.stopped)} partition-seconds"
    if p.unowned is not None and p.restoring is not None:
        text += f" ({_num(p.unowned)} unowned, {_num(p.restoring)} restoring)"
    place, others = _standing(p, points, lambda q: q.stopped)
    if place == "least":
        return text + f", {_shared('the least: it kept processing most', others)}"
    if place == "same":
        return text + ", as every other run"
    leader = min((q for q in points if q.stopped is not None), key=lambda q: q.stopped or 0.0)
    if leader is not p and leader.stopped:
        text += f", {p.stopped / leader.stopped:,.1f} times as long as {leader.name}"
    return text + (", the most" if place == "most" else "")


def _cost(p: Point) -> str:
    """What its stops were: partitions waiting for an owner, or state being rebuilt."""
    if p.unowned is None or p.restoring is None or p.stopped is None or p.stopped <= 0:
        return ""
    if p.unowned >= p.restoring:
        if p.held is None:  # a summary written before the split
            return f"; {p.unowned / p.stopped:.0%} of that was partitions unowned"
        held, between = p.held / p.stopped, max(p.unowned - p.held, 0.0) / p.stopped
        text = {
            "held": f"{held:.0%} of that was partitions held for a member that went away, unowned",
            "between": f"{between:.0%} of that was partitions unowned, between owners",
        }
        also = {
            "held": f"; {between:.0%} was between owners" if between > 0 else "",
            "between": f"; {held:.0%} was held for a member that went away" if held > 0 else "",
        }
        first = "held" if held >= between else "between"
        return f"; {text[first]}{also[first]}"
    return f"; {p.restoring / p.stopped:.0%} of that was state being rebuilt on a new owner"


def sentence(p: Point, points: Sequence[Point]) -> str:
    """One run's sentence, from its numbers and those of the others in its situation."""
    return f"{p.name} {_moves(p, points)}; {_stops(p, points)}{_cost(p)}."


# --- what the designs say ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """Where a protocol's design says it wins: in ``situation`` (a scenario; None: any),
    ``metric`` no higher than any of ``than`` that ran there."""

    protocol: str  # a Point's name
    situation: str | None
    metric: str  # moved, stopped, restoring
    than: tuple[str, ...]
    why: str


def _figure(metric: str, value: float) -> str:
    return f"{value:,.0f}" if metric == "moved" else _num(value)


METRICS: Final[dict[str, tuple[str, Callable[[Point], float | None]]]] = {
    "moved": ("partitions moved", lambda p: p.moved),
    "stopped": ("stopped partition-seconds", lambda p: p.stopped),
    "restoring": ("restoring partition-seconds", lambda p: p.restoring),
}

_BOUNCED = ("range", "cooperative-sticky")
CONSUMER: Final = "consumer"  # KIP-848's consumer group protocol: the coordinator assigns
DESIGN_CLAIMS: Final = (
    Claim(
        "cooperative-sticky",
        None,
        "stopped",
        ("range",),
        "a cooperative rebalance stops only the partitions that move (KIP-429)",
    ),
    Claim(
        "cooperative-deferred",
        "rolling-bounce",
        "moved",
        _BOUNCED,
        "it holds a bounced member's partitions until the member is back (Design II)",
    ),
    Claim(
        "cooperative-deferred",
        "rolling-bounce",
        "stopped",
        _BOUNCED,
        "waiting for a bounced member should cost less than moving its state",
    ),
    Claim(
        f"cooperative-sticky{STATIC}",
        "rolling-bounce",
        "moved",
        _BOUNCED,
        "a static member back within its session timeout keeps its partitions (KIP-345)",
    ),
    Claim(
        f"cooperative-sticky{STATIC}",
        "rolling-bounce",
        "stopped",
        _BOUNCED,
        "a static member's partitions wait for it and keep their state (KIP-345)",
    ),
    Claim(
        CONSUMER,
        "rolling-bounce",
        "stopped",
        _BOUNCED,
        "the coordinator revokes only what must move and hands it on once it is released, "
        "with no group-wide barrier (KIP-848)",
    ),
    Claim(
        CONSUMER,
        "scale-up",
        "stopped",
        ("range",),
        "a member that joins takes its share without stopping anyone else's partitions (KIP-848)",
    ),
    Claim(
        "high-availability",
        "scale-up",
        "restoring",
        ("range", "cooperative-sticky"),
        "a new member warms a partition's state up before it takes the partition (KIP-441)",
    ),
    Claim(
        "high-availability",
        "process-death",
        "stopped",
        ("range", "cooperative-sticky"),
        "a standby with the dead member's state takes its partitions over (KIP-441)",
    ),
)


@dataclass(frozen=True, slots=True)
class Verdict:
    claim: Claim
    held: bool  # no rival had less
    text: str
    tied: bool = False  # held, but a rival had as little: the runs do not show the claim


def _scenario(situation: str) -> str:
    return situation.split(",", 1)[0]


def verdicts(points: Sequence[Point], claims: Sequence[Claim] = DESIGN_CLAIMS) -> list[Verdict]:
    """Each claim that applies to ``points`` (one situation) and has a rival present:
    held or not, with the measured numbers, and when not, the measured reason."""
    found = []
    for claim in claims:
        for p in points:
            if p.protocol == claim.protocol and claim.situation in (None, _scenario(p.situation)):
                found += _verdict(claim, p, [q for q in points if q.protocol in claim.than])
    return found


def _verdict(claim: Claim, p: Point, rivals_present: Sequence[Point]) -> list[Verdict]:
    """``claim`` checked for one run ``p`` against every run of its rivals (none: no
    verdict)."""
    label, key = METRICS[claim.metric]
    value = key(p)
    rivals = [(q, v) for q in rivals_present if (v := key(q)) is not None]
    if value is None or not rivals:
        return []
    mine = _figure(claim.metric, value)
    against = ", ".join(f"{q.name} {_figure(claim.metric, v)}" for q, v in rivals)
    who = _names([q.name for q, _ in rivals])
    beaten = sorted(((v, q.name, q) for q, v in rivals if v < value), key=lambda b: b[:2])
    tied = [q.name for q, v in rivals if v == value]
    if not beaten and tied:
        text = (
            f"A tie: {p.name} had as many {label} as {_names(tied)} ({mine} against "
            f"{against}), so these runs neither show nor refute that {claim.why}."
        )
        return [Verdict(claim, True, text, tied=True)]
    if not beaten:
        text = (
            f"As designed, {p.name} had no more {label} than {who} "
            f"({mine} against {against}): {claim.why}."
        )
    else:
        text = (
            f"Not as designed: {claim.why}, so {p.name} should have had no more {label} "
            f"than {who}; it had {mine} against {against}. "
            + _why_not(p, beaten[0][2], claim.metric)
        )
    return [Verdict(claim, not beaten, text)]


def _why_not(p: Point, rival: Point, metric: str) -> str:
    """The measured reason ``p`` lost to ``rival``: which part of its stops was larger, and
    whether the rival gave more partitions back to the member that had their state."""
    if metric == "moved":
        return (
            f"It handed partitions to another member {p.moved or 0:,} times, "
            f"{rival.name} {rival.moved or 0:,}."
        )
    parts = [
        f"{label} {_num(mine)} against {_num(theirs)}"
        for label, mine, theirs in (
            ("unowned", p.unowned, rival.unowned),
            ("restoring", p.restoring, rival.restoring),
        )
        if mine is not None and theirs is not None and mine > theirs
    ]
    if not parts:
        return "Its stops are not split into unowned and restoring in this report."
    reason = f"Where it lost: {'; '.join(parts)} partition-seconds"
    waited = p.unowned is not None and rival.unowned is not None and p.unowned > rival.unowned
    moved_less = p.moved is not None and rival.moved is not None and p.moved < rival.moved
    rebuilt = (
        p.restoring is not None and rival.restoring is not None and p.restoring > rival.restoring
    )
    if waited and moved_less:
        reason += (
            f" (its partitions waited for their member longer than {rival.name} took to move"
            " them and rebuild their state)"
        )
    elif rebuilt and _cut_share(rival) > _cut_share(p):
        reason += f" ({_cuts(p, rival)})"
    elif rebuilt and (rival.returned or 0) > (p.returned or 0):
        reason += (
            f" ({rival.name} handed partitions back to the member that had them last"
            f" {rival.returned or 0:,} times, {p.name} {p.returned or 0:,})"
        )
    return reason + "."


def _cut_share(p: Point) -> float:
    return (p.restores_cut or 0) / p.restores if p.restores else 0.0


def _cuts(p: Point, rival: Point) -> str:
    """How many restores each of ``rival`` and ``p`` cut short, and what they replayed."""
    return (
        f"{rival.name} cut {rival.restores_cut or 0:,} of its {rival.restores or 0:,} restores "
        "short, handing the partition on before its new owner had rebuilt its state, and "
        f"replayed {rival.records_restored or 0:,} records; {p.name} cut "
        f"{p.restores_cut or 0:,} of its {p.restores or 0:,} and replayed "
        f"{p.records_restored or 0:,}"
    )
