"""``huddle report RUN_DIR...``: the arguments and the run (``huddle.cli.report`` dispatches)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from huddle.pipeline.defaults import DEFAULT_GAP_MS, DEFAULT_MASTER


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``huddle report``; importable without PySpark."""
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--master", default=DEFAULT_MASTER, help="Spark master URL")
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=DEFAULT_GAP_MS,
        help="longest gap between a member's ticks that still counts as processing",
    )
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="Spark's own console progress and log lines too (off: huddle's progress only)",
    )
    parser.add_argument(
        "--compare-out",
        type=Path,
        default=None,
        help="where the comparison of several runs goes (default: <first run>/../comparison)",
    )


def run_report(args: argparse.Namespace) -> int:
    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.compare import write_comparison
    from huddle.pipeline.report import write_report
    from huddle.pipeline.spark import build_session

    missing = [d for d in args.run_dirs if not (d / "events").is_dir()]
    if missing:
        print(f"no events/ directory in: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    print("huddle report: starting Spark", flush=True)
    spark = build_session(
        args.master,
        shuffle_partitions=args.shuffle_partitions,
        driver_memory=args.driver_memory,
        verbose=bool(args.verbose),
    )
    summaries = []
    try:
        total = len(args.run_dirs)
        for index, run_dir in enumerate(args.run_dirs, 1):
            began = time.monotonic()

            def step(what: str, index: int = index, run_dir: Path = run_dir) -> None:
                print(f"huddle report: [{index}/{total}] {run_dir}: {what}", flush=True)

            analysis = analyse(spark, run_dir, args.gap_ms, progress=step)
            step("writing the report")
            summary = write_report(analysis)
            spark.catalog.clearCache()  # its tables are written: free them for the next run
            summaries.append(summary)
            print(
                f"{run_dir}: {summary.total_unavailable_partition_seconds} unavailable "
                f"partition-seconds, {summary.rebalance_count} rebalances, "
                f"{summary.violations_total} violations ({time.monotonic() - began:.1f} s) "
                f"-> {run_dir / 'report' / 'report.html'}",
                flush=True,
            )
        if len(summaries) > 1:
            out = args.compare_out or args.run_dirs[0].resolve().parent / "comparison"
            print(write_comparison(summaries, out, args.run_dirs))
            print(f"comparison: {out / 'comparison.html'}")
    finally:
        spark.stop()
    return 1 if any(s.violations_total for s in summaries) else 0
