"""The demo (the README's first command): one rolling bounce, three protocols, one report.

Runs the ``rolling-bounce`` scenario with real member processes under the eager ``range``
assignor, ``cooperative-sticky`` (Design I) and ``cooperative-deferred`` (Design II), each
against its own coordinator, then the PySpark report comparing them. About 3 minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from huddle.chaos.harness import RunSettings
from huddle.chaos.harness import run as run_chaos
from huddle.chaos.protocols import ProtocolOptions
from huddle.chaos.scenarios import BUILT_IN, Shape
from huddle.cli.render import plural
from huddle.cli.report import missing_extra
from huddle.logs import configure_logging

PROTOCOLS = ("range", "cooperative-sticky", "cooperative-deferred")


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--members", type=int, default=6)
    demo.add_argument("--partitions", type=int, default=60)
    demo.add_argument("--duration", type=float, default=30.0, help="seconds per protocol")
    demo.add_argument("--run-dir", type=Path, default=None, help="default: runs/demo-<time>")
    demo.add_argument(
        "--verbose", action="store_true", help="Spark's own console progress and log lines too"
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    problem = missing_extra("huddle demo")  # before minutes of runs, not after them
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from huddle.pipeline.analysis import analyse
    from huddle.pipeline.compare import write_comparison
    from huddle.pipeline.report import write_report
    from huddle.pipeline.spark import build_session

    root: Path = args.run_dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True, exist_ok=True)
    configure_logging("json", "info", stream=open(root / "harness.log", "a", encoding="utf-8"))  # noqa: SIM115
    shape = Shape(duration=args.duration, members=args.members)
    print(
        f"huddle demo: rolling bounce of {args.members} {plural(args.members, 'member')} over "
        f"{args.partitions} {plural(args.partitions, 'partition')}, {args.duration:g} s per "
        f"protocol, runs in {root}"
    )
    run_dirs: list[Path] = []
    for protocol in PROTOCOLS:
        run_dir = root / protocol
        settings = RunSettings(
            run_dir=run_dir,
            protocol=protocol,
            # deferred: a bounced member comes back well within the delay
            options=ProtocolOptions(delay_ms=10_000),
            members=args.members,
            partitions=args.partitions,
            duration=args.duration,
        )
        print(f"\n== {protocol} ==")
        result = run_chaos(settings, BUILT_IN["rolling-bounce"](shape), print)
        if result.outcome != "completed":
            print(f"huddle demo: the {protocol} run ended {result.outcome}")
            return result.exit_code
        run_dirs.append(run_dir)
    print("\n== report (PySpark) ==", flush=True)
    spark = build_session("local[*]", verbose=bool(args.verbose))
    try:
        summaries = []
        for d in run_dirs:

            def step(what: str, d: Path = d) -> None:
                print(f"report: {d.name}: {what}", flush=True)

            summaries.append(write_report(analyse(spark, d, 100.0, progress=step)))
        print(write_comparison(summaries, root / "comparison", run_dirs))
    finally:
        spark.stop()
    print(f"\nreports: {', '.join(str(d / 'report' / 'report.html') for d in run_dirs)}")
    print(f"comparison: {root / 'comparison' / 'comparison.html'} (and comparison.md)")
    return 1 if any(s.violations_total for s in summaries) else 0
