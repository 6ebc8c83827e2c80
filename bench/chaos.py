"""What each rebalance protocol costs under real faults: chaos runs analysed by the pipeline.

``python -m bench.chaos`` runs, with the chaos harness's Python API (a coordinator and
real member processes on 127.0.0.1; the harness stops every process it starts):

1. ``rolling-bounce`` (6 members, 60 partitions) with ``range`` (eager) and
   ``cooperative-sticky``, ``--repeats`` times each, alternating so both meet the same
   machine noise; then once each ``cooperative-deferred`` (a scheduled-rebalance delay far
   longer than a bounce) and ``static-bounce`` with ``cooperative-sticky``. All runs are
   analysed in one Spark session (``huddle.pipeline.analysis.analyse`` +
   ``huddle.pipeline.summary.summarise``). Targets: cooperative unavailable partition-seconds
   <= 1/5 of eager's (the median over the pairs of the ratio within a pair); deferred and
   static: no partition changes owner when a member comes back within the delay.
2. ``process-death`` (cooperative-sticky, default settings): for each partition the killed
   member owned, the time from the kill to the first ``processed`` event by another member.
   Target: <= 2 s.

Figures go to stdout, the harness's progress lines to stderr. The exit status is 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import quiet_logs
from huddle.chaos.eventfiles import read_events
from huddle.chaos.events import events_dir
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.protocols import ProtocolOptions
from huddle.chaos.scenarios import Shape, built_in
from huddle.pipeline.defaults import DEFAULT_GAP_MS, DEFAULT_MASTER

MEMBERS = 6
PARTITIONS = 60
RECOVERY_TARGET_S = 2.0
COOPERATIVE_RATIO_TARGET = 0.2


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    scenario: str
    protocol: str
    options: ProtocolOptions
    no_move_target: bool  # the target: no partition changes owner


EAGER = Case("range (eager)", "rolling-bounce", "range", ProtocolOptions(), False)
COOPERATIVE = Case(
    "cooperative-sticky", "rolling-bounce", "cooperative-sticky", ProtocolOptions(), False
)


def _cases(delay_ms: int, repeats: int) -> list[Case]:
    """Eager and cooperative alternating ``repeats`` times, then deferred and static."""
    return [
        *[case for _ in range(repeats) for case in (EAGER, COOPERATIVE)],
        Case(
            f"cooperative-deferred {delay_ms / 1000:g}s",
            "rolling-bounce",
            "cooperative-deferred",
            ProtocolOptions(delay_ms=delay_ms),
            True,
        ),
        Case(
            "static cooperative-sticky",
            "static-bounce",
            "cooperative-sticky",
            ProtocolOptions(),
            True,
        ),
    ]


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_scenario(
    run_dir: Path, scenario: str, protocol: str, options: ProtocolOptions, duration: float
) -> str:
    settings = RunSettings(
        run_dir=run_dir,
        protocol=protocol,
        options=options,
        members=MEMBERS,
        partitions=PARTITIONS,
        duration=duration,
    )
    shape = Shape(duration, MEMBERS, 0, settings.session_timeout_ms / 1000)
    started = time.monotonic()
    result = run(settings, built_in(scenario, shape), _progress)
    _progress(f"{run_dir.name}: {result.outcome} in {time.monotonic() - started:.1f} s")
    return result.outcome


def _events(run_dir: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(events_dir(run_dir).glob("*.jsonl")):
        if path.stem == "coordinator":
            continue  # structlog lines of the coordinator, no ``ts``
        records += read_events(path)
    records.sort(key=lambda r: float(r["ts"]))
    return records


def _settled(run_dir: Path) -> bool:
    """Whether the harness saw the group settle before the scenario started."""
    return any(
        r["event"] == "steady" and r.get("settled") is True
        for r in read_events(events_dir(run_dir) / "chaos.jsonl")
    )


def _first_fault_ts(run_dir: Path) -> float | None:
    faults = [float(r["ts"]) for r in _events(run_dir) if r["event"] == "fault"]
    return min(faults) if faults else None


def owner_changes(ownership: Sequence[Any], since: float | None) -> int:
    """Consecutive ownership intervals of a partition held by different member names
    (a bounced ``member-3`` is a new process with the same name: the same member), counting
    only intervals that start at or after ``since`` (the first fault)."""
    by_partition: dict[tuple[str, int], list[tuple[float, str]]] = {}
    for r in ownership:
        by_partition.setdefault((r["topic"], int(r["partition"])), []).append(
            (float(r["start"]), str(r["proc"]))
        )
    changes = 0
    for intervals in by_partition.values():
        intervals.sort()
        for (_, prev), (start, proc) in itertools.pairwise(intervals):
            if proc != prev and (since is None or start >= since):
                changes += 1
    return changes


@dataclass(frozen=True, slots=True)
class Recovery:
    victim: str
    kill_ts: float
    partitions: int
    seconds: list[float]  # one per partition that another member processed after the kill
    never: int  # partitions nobody else processed before the run ended


def recovery(run_dir: Path) -> Recovery | None:
    """From the events: the kill, the partitions the victim owned then, and for each the
    first ``processed`` event by another member after the kill."""
    records = _events(run_dir)
    kill = next((r for r in records if r["event"] == "fault" and r["action"] == "kill"), None)
    if kill is None:
        return None
    victim, kill_ts = str(kill["target"]), float(kill["ts"])
    owned: set[tuple[str, int]] = set()
    for r in records:
        if float(r["ts"]) > kill_ts:
            break
        if r["proc"] != victim:
            continue
        if r["event"] == "process_started":
            owned.clear()
        elif r["event"] in ("assigned", "revoked", "lost"):
            tps = {(str(t), int(p)) for t, p in r["partitions"]}
            owned = owned | tps if r["event"] == "assigned" else owned - tps
    first: dict[tuple[str, int], float] = {}
    for r in records:
        if r["event"] != "processed" or r["proc"] == victim or float(r["ts"]) <= kill_ts:
            continue
        tp = (str(r["topic"]), int(r["partition"]))
        if tp in owned and tp not in first:
            first[tp] = float(r["ts"]) - kill_ts
    return Recovery(victim, kill_ts, len(owned), sorted(first.values()), len(owned - set(first)))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--duration", type=float, default=30.0, help="seconds per bounce run")
    p.add_argument("--repeats", type=int, default=3, help="eager/cooperative pairs")
    p.add_argument("--death-duration", type=float, default=20.0, help="process-death run")
    p.add_argument("--delay-ms", type=int, default=10_000, help="cooperative-deferred delay")
    p.add_argument("--keep", type=Path, help="keep the run directories here (default: removed)")
    p.add_argument("--master", default=DEFAULT_MASTER)
    args = p.parse_args(argv)
    quiet_logs()

    root = args.keep or Path(tempfile.mkdtemp(prefix="huddle-bench-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        return _bench(args, root)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        print(f"total wall time {time.monotonic() - started:.0f} s")


def _bench(args: argparse.Namespace, root: Path) -> int:
    cases = _cases(args.delay_ms, max(args.repeats, 1))
    dirs: list[Path] = []
    outcomes: list[str] = []
    for i, case in enumerate(cases):
        run_dir = root / f"{i}-{case.scenario}-{case.protocol}"
        outcomes.append(
            run_scenario(run_dir, case.scenario, case.protocol, case.options, args.duration)
        )
        dirs.append(run_dir)
    death_dir = root / "process-death"
    death_outcome = run_scenario(
        death_dir, "process-death", "cooperative-sticky", ProtocolOptions(), args.death_duration
    )

    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.spark import build_session
    from huddle.pipeline.summary import RunSummary, summarise

    spark = build_session(args.master, app_name="bench-chaos")
    summaries: list[RunSummary] = []
    changes: list[int] = []
    try:
        t0 = time.monotonic()
        for run_dir in [*dirs, death_dir]:
            analysis = analyse(spark, run_dir, DEFAULT_GAP_MS)
            summaries.append(summarise(analysis))
            changes.append(owner_changes(analysis.ownership, _first_fault_ts(run_dir)))
        analysis_s = time.monotonic() - t0
    finally:
        spark.stop()

    print(
        f"rolling bounce: {MEMBERS} members, {PARTITIONS} partitions, {args.duration:g} s runs; "
        f"pipeline analysis of {len(summaries)} runs in one Spark session: {analysis_s:.1f} s"
    )
    print(
        f"{'protocol':30} {'outcome':>9} {'unavail p-s':>11} {'vs eager':>8} "
        f"{'rebalances':>10} {'violations':>10} {'owner changes':>13}"
    )

    def unavailable(s: RunSummary) -> float:
        return float(s.total_unavailable_partition_seconds or 0.0)

    for i, (case, outcome, s, moved) in enumerate(
        zip(cases, outcomes, summaries, changes, strict=False)
    ):
        pair = i // 2 if case in (EAGER, COOPERATIVE) else None
        ratio = "-"
        if case is COOPERATIVE and pair is not None:
            eager = unavailable(summaries[2 * pair])
            ratio = f"{unavailable(s) / eager:.3f}" if eager > 0 else "-"
        print(
            f"{case.label:30} {outcome:>9} {unavailable(s):11.2f} {ratio:>8} "
            f"{s.rebalance_count:10d} {s.violations_total:10d} {moved:13d}"
        )
    eagers = [unavailable(s) for c, s in zip(cases, summaries, strict=False) if c is EAGER]
    coops = [unavailable(s) for c, s in zip(cases, summaries, strict=False) if c is COOPERATIVE]
    ratios = [c / e for e, c in zip(eagers, coops, strict=True) if e > 0]
    median_ratio = statistics.median(ratios) if ratios else float("nan")
    coop_met = bool(ratios) and median_ratio <= COOPERATIVE_RATIO_TARGET
    within = sum(r <= COOPERATIVE_RATIO_TARGET for r in ratios)
    print(
        f"target cooperative <= 1/5 of eager over {len(ratios)} pairs: median ratio "
        f"{median_ratio:.3f} (pairs {', '.join(f'{r:.3f}' for r in ratios)}; "
        f"{within}/{len(ratios)} within); medians {statistics.median(coops):.2f} vs "
        f"{statistics.median(eagers):.2f} partition-seconds: {'met' if coop_met else 'NOT met'}"
    )
    violations = sum(int(s.violations_total) for s in summaries)
    unfinished = [o for o in [*outcomes, death_outcome] if o != "completed"]
    unsettled = [d.name for d in [*dirs, death_dir] if not _settled(d)]
    met = coop_met and violations == 0 and not unfinished and not unsettled
    if unfinished:
        print(f"runs that did not complete: {len(unfinished)} ({', '.join(unfinished)})")
    if unsettled:
        print(f"runs whose group did not settle before the scenario: {', '.join(unsettled)}")
    print(f"safety violations over all runs: {violations}")
    for case, moved in zip(cases, changes, strict=False):
        if case.no_move_target:
            ok = moved == 0
            met = met and ok
            print(
                f"target {case.label}: no owner change: {moved} changes: "
                f"{'met' if ok else 'NOT met'}"
            )

    death = summaries[-1]
    rec = recovery(death_dir)
    print(
        f"process death: cooperative-sticky, {MEMBERS} members, {PARTITIONS} partitions, "
        f"{args.death_duration:g} s ({death_outcome}); unavailable "
        f"{float(death.total_unavailable_partition_seconds or 0.0):.2f} partition-seconds, "
        f"{death.rebalance_count} rebalances, {death.violations_total} violations"
    )
    if rec is None or not rec.seconds:
        print("process death: no kill or no recovery found in the events: target NOT met")
        return 1
    worst = max(rec.seconds)
    ok = rec.never == 0 and worst <= RECOVERY_TARGET_S
    met = met and ok
    print(
        f"  {rec.victim} killed owning {rec.partitions} partitions; processed again by others "
        f"after: median {statistics.median(rec.seconds):.3f} s, max {worst:.3f} s, "
        f"min {min(rec.seconds):.3f} s, never {rec.never}"
    )
    print(f"target recovery <= {RECOVERY_TARGET_S:g} s: {'met' if ok else 'NOT met'}")
    print(f"all targets {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
