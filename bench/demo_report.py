"""The demo's report step, with Spark's defaults against its small-data settings.

``python -m bench.demo_report DEMO_DIR [--rounds N]`` copies the event logs of every run
under ``DEMO_DIR`` (a ``huddle demo`` output: ``runs/demo-*``) to a temporary directory and
times what ``huddle demo`` does after its runs: one SparkSession, each run's ``analyse`` and
``write_report`` (the cache emptied after each), then the comparison. Each round runs it
twice, each in a fresh process (a JVM of its own), back to back: with the session as
``huddle demo`` built it before (``spark.sql.shuffle.partitions`` 8, adaptive query
execution and whole-stage code generation on) and with ``huddle.pipeline.spark.SMALL_DATA``
(one shuffle partition, both off). The machine is shared: compare within a round.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import cpu_model

VARIANTS = ("defaults", "small-data")


def one(demo_dir: Path, out: Path, small_data: bool) -> float:
    """Seconds for the report step of every run under ``demo_dir`` (outputs to ``out``)."""
    from huddle.cli.demo import intro
    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.compare import write_comparison
    from huddle.pipeline.report import write_report
    from huddle.pipeline.spark import build_session

    runs = []
    for run in sorted(d for d in demo_dir.iterdir() if (d / "events").is_dir()):
        shutil.copytree(run / "events", out / run.name / "events")
        runs.append(out / run.name)
    began = time.monotonic()
    spark = build_session("local[*]", small_data=small_data)
    try:
        summaries = []
        for run in runs:
            summaries.append(write_report(analyse(spark, run, 100.0)))
            spark.catalog.clearCache()
        write_comparison(summaries, out / "comparison", runs, (), intro())
    finally:
        spark.stop()
    return time.monotonic() - began


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
            print(f"{one(args.demo_dir, Path(tmp), args.one == 'small-data'):.1f}")
        return 0
    print(f"CPU: {cpu_model()}; runs under {args.demo_dir}")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for variant in VARIANTS:
            argv_ = [sys.executable, "-m", "bench.demo_report", str(args.demo_dir)]
            done = subprocess.run(
                [*argv_, "--one", variant], capture_output=True, text=True, check=True
            )
            times[variant].append(float(done.stdout.split()[-1]))
            print(f"round {r + 1}: {variant}: {times[variant][-1]:.1f} s", flush=True)
    base, small = (statistics.median(times[v]) for v in VARIANTS)
    print(f"median: defaults {base:.1f} s, small-data {small:.1f} s ({base / small:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
