"""Pipeline throughput: ``analyse`` + ``summarise`` + the report of 10 million record events.

``python -m bench.pipeline [--events N]`` writes a synthetic run directory to a temporary
directory (removed at the end): ``events/member-<i>.jsonl`` in the format of
``huddle.chaos.events`` (what ``huddle.chaos.worker`` writes: a 20 ms tick, one ``processed``
event per owned partition per tick, ``committed`` every second) plus ``events/chaos.jsonl``. The
partitions start spread over the members; half-way through a cooperative rebalance moves
a tenth of them to the next member (commit, ``revoked``, then ``assigned`` in the next
generation, processing resumed at the committed offset), so every job has something to
find and the run is consistent (no violations). The generation is not timed in the figure.

The figure: wall time of ``huddle.pipeline.analysis.analyse`` (local mode, every table collected)
plus ``huddle.pipeline.report.write_report`` (``summarise``, Parquet tables, ``summary.json``,
``report.md``, PNGs), and events per second. Target: 10 million events in under 2 minutes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from huddle.pipeline.defaults import DEFAULT_GAP_MS, DEFAULT_MASTER

TICK_S = 0.02
COMMIT_EVERY = 50  # ticks: one commit a second
T0 = 1_700_000_000.0
TOPIC = "chaos"
TARGET_S = 120.0


def _partitions_field(partitions: Sequence[int]) -> str:
    return "[" + ",".join(f'["{TOPIC}",{p}]' for p in partitions) + "]"


def generate(run_dir: Path, events: int, members: int, partitions: int) -> int:
    """Write the run; returns the number of lines written."""
    out = run_dir / "events"
    out.mkdir(parents=True)
    ticks = -(-events // partitions)
    mid = ticks // 2
    moved = {p for p in range(partitions) if p // members == 0}  # a tenth with 200 / 20

    def owner(p: int, after: bool) -> int:
        return (p + 1) % members if after and p in moved else p % members

    total = 0
    end_ts = T0 + (ticks + 5) * TICK_S
    for i in range(members):
        proc = f"member-{i + 1}"
        mid_ = f"{proc}-0a1b2c3d"
        skew = i * 0.0007  # members' ticks are not simultaneous
        head = f'"proc":"{proc}","event":'
        ids = f'"member_id":"{mid_}","generation":'
        before = [p for p in range(partitions) if owner(p, False) == i]
        after = [p for p in range(partitions) if owner(p, True) == i]
        lost = [p for p in before if p not in after]
        gained = [p for p in after if p not in before]
        with open(out / f"{proc}.jsonl", "w", encoding="utf-8") as f:
            lines = [
                f'{{"ts":{T0 - 0.05 + skew:.6f},{head}"process_started","pid":{1000 + i},'
                f'"role":"member","group_id":"chaos","protocol":"cooperative-sticky",'
                f'"instance_id":null}}\n',
                f'{{"ts":{T0 - 0.02 + skew:.6f},{head}"joined",{ids}1,'
                f'"leader":{str(i == 0).lower()}}}\n',
                f'{{"ts":{T0 - 0.01 + skew:.6f},{head}"assigned",{ids}1,'
                f'"partitions":{_partitions_field(before)}}}\n',
            ]
            gen = 1
            owned = before
            prefix = {
                p: f'{head}"processed",{ids}{{g}},"topic":"{TOPIC}","partition":{p},"offset":'
                for p in range(partitions)
            }
            pre = {p: prefix[p].format(g=1) for p in owned}
            for k in range(ticks):
                ts = T0 + k * TICK_S + skew
                for p in owned:
                    if p not in gained:
                        off = k
                    elif k == mid or k == mid + 1:
                        continue  # assigned after tick mid: it starts two ticks later
                    else:
                        off = k - 2  # resumed at the commit, two ticks later
                    lines.append(f'{{"ts":{ts:.6f},{pre[p]}{off},"count":1}}\n')
                if k % COMMIT_EVERY == COMMIT_EVERY - 1 and k != mid - 1:
                    for p in owned:
                        nxt = k + 1 if p not in gained else k - 1
                        if p in gained and k < mid + 2:
                            continue
                        lines.append(
                            f'{{"ts":{ts + 0.0005:.6f},{head}"committed",{ids}{gen},'
                            f'"topic":"{TOPIC}","partition":{p},"offset":{nxt},'
                            f'"accepted":true,"error":null}}\n'
                        )
                if k == mid - 1:  # the rebalance, between tick mid-1 and tick mid
                    gen = 2
                    lines.append(
                        f'{{"ts":{ts + 0.001:.6f},{head}"joined",{ids}2,"leader":false}}\n'
                    )
                    for p in lost:
                        lines.append(
                            f'{{"ts":{ts + 0.002:.6f},{head}"committed",{ids}2,'
                            f'"topic":"{TOPIC}","partition":{p},"offset":{k + 1},'
                            f'"accepted":true,"error":null}}\n'
                        )
                    if lost:
                        lines.append(
                            f'{{"ts":{ts + 0.003:.6f},{head}"revoked",{ids}2,'
                            f'"partitions":{_partitions_field(lost)}}}\n'
                        )
                    gen = 3
                    lines.append(f'{{"ts":{ts + 0.03:.6f},{head}"joined",{ids}3,"leader":false}}\n')
                    lines.append(
                        f'{{"ts":{ts + 0.031:.6f},{head}"assigned",{ids}3,'
                        f'"partitions":{_partitions_field(gained)}}}\n'
                    )
                    owned = after
                    pre = {p: prefix[p].format(g=3) for p in owned}
                if len(lines) >= 100_000:
                    total += len(lines)
                    f.write("".join(lines))
                    lines = []
            lines.append(
                f'{{"ts":{end_ts + skew:.6f},{head}"process_stopped","reason":"signal"}}\n'
            )
            total += len(lines)
            f.write("".join(lines))
    with open(out / "chaos.jsonl", "w", encoding="utf-8") as f:
        f.write(
            f'{{"ts":{T0 - 1:.6f},"proc":"chaos","event":"run_started","scenario":"synthetic",'
            f'"protocol":"cooperative-sticky","members":{members},"partitions":{partitions},'
            f'"settings":{{}}}}\n'
            f'{{"ts":{end_ts + 1:.6f},"proc":"chaos","event":"run_finished",'
            f'"outcome":"completed"}}\n'
        )
    return total + 2


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__)
    p.add_argument("--events", type=int, default=10_000_000, help="processed events")
    p.add_argument("--members", type=int, default=20)
    p.add_argument("--partitions", type=int, default=200)
    p.add_argument("--master", default=DEFAULT_MASTER)
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--shuffle-partitions", type=int, default=8)
    args = p.parse_args(argv)
    if args.members < 2 or args.partitions < args.members or args.events < args.partitions:
        p.error("need members >= 2, partitions >= members, events >= partitions")

    tmp = Path(tempfile.mkdtemp(prefix="huddle-bench-pipeline-"))
    try:
        run_dir = tmp / "synthetic"
        t = time.monotonic()
        lines = generate(run_dir, args.events, args.members, args.partitions)
        size = sum(f.stat().st_size for f in (run_dir / "events").iterdir())
        print(
            f"generated {lines:,} lines ({size / 2**20:,.0f} MiB) for {args.events:,} processed "
            f"events, {args.members} members x {args.partitions} partitions, "
            f"in {time.monotonic() - t:.1f} s (not timed below)"
        )
        return _measure(args, run_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(args: argparse.Namespace, run_dir: Path) -> int:
    t = time.monotonic()
    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.report import write_report
    from huddle.pipeline.spark import build_session

    spark = build_session(
        args.master,
        app_name="bench-pipeline",
        shuffle_partitions=args.shuffle_partitions,
        driver_memory=args.driver_memory,
    )
    print(
        f"Spark session ({args.master}, driver {args.driver_memory}): {time.monotonic() - t:.1f} s"
    )
    try:
        t0 = time.monotonic()
        analysis = analyse(spark, run_dir, DEFAULT_GAP_MS)
        t1 = time.monotonic()
        summary = write_report(analysis, run_dir / "report")
        t2 = time.monotonic()
    finally:
        spark.stop()
    total = t2 - t0
    records = int(summary.records_processed)
    print(f"analyse (every job, tables collected): {t1 - t0:.1f} s")
    print(f"summarise + report (Parquet, summary.json, report.md, PNGs): {t2 - t1:.1f} s")
    print(
        f"total {total:.1f} s for {records:,} records: {records / total:,.0f} events/s; "
        f"{summary.ownership_intervals} ownership intervals, "
        f"{summary.violations_total} violations, "
        f"{summary.total_unavailable_partition_seconds} unavailable partition-seconds"
    )
    print(
        f"target {args.events:,} events < {TARGET_S:g} s: "
        f"{'met' if total < TARGET_S else 'NOT met'}"
        + ("" if args.events == 10_000_000 else " (target is for 10,000,000)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
