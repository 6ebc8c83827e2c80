"""A million fuzzed frames against ``huddle serve``: no crash, every answer as the protocol says.

Starts ``huddle serve`` (uvloop, JSON logs at warning level into a file), runs
``huddle.chaos.fuzzrun.fuzz`` against it (fuzzed frames over many connections, each checked,
and a bystander member heartbeating in another group), then reads the coordinator's log:
any error-level line or traceback is a crash. Prints the frames tried, the calls answered,
the kinds of refusal seen, the violations, and the server's peak RSS.

``--wire kafka`` fuzzes the Kafka listener instead (``--kafka-port``): Kafka requests of
every API and version served, mutated (``huddle.chaos.kafka_fuzzrun``), with a bystander
consumer heartbeating on the Kafka wire.

Run: ``python -m bench.fuzz [--wire huddle|kafka] [--frames 1000000] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from huddle.testing import free_port

from bench.common import cpu_model, quiet_logs
from bench.fairness import _peak_rss_mib
from bench.processes import huddle_command, new_event_loop, wait_listening
from huddle.chaos.fuzzrun import FuzzReport, fuzz
from huddle.chaos.kafka_fuzzrun import KafkaFuzzReport, fuzz_kafka


def _errors(log: Path) -> list[str]:
    bad = []
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            bad.append(line)  # not ours: a crash's own output
            continue
        if event.get("level") in ("error", "critical") or "exception" in event:
            bad.append(line)
    return bad


def main(args: argparse.Namespace) -> int:
    port = free_port()
    flags = ["--log-format", "json", "--initial-rebalance-delay-ms", "0"]
    kafka = args.wire == "kafka"
    target = free_port() if kafka else port
    if kafka:
        flags += ["--kafka-port", str(target)]
    report: FuzzReport
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        command = huddle_command(port, *flags)
        with log.open("w") as out:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        try:
            wait_listening(proc, target, 20.0)
            loop = new_event_loop()
            run = (
                fuzz_kafka(target, frames=args.frames, seed=args.seed, bystander_process=True)
                if kafka
                else fuzz(target, frames=args.frames, seed=args.seed)
            )
            try:
                report = loop.run_until_complete(run)
            finally:
                loop.close()
            alive = proc.poll() is None
            rss = _peak_rss_mib(proc.pid) if alive else float("nan")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        errors = _errors(log)
    print(f"CPU: {cpu_model()}; {args.wire} wire; seed {args.seed}")
    print(
        f"{report.frames:,} fuzzed frames over {report.connections:,} connections in "
        f"{report.seconds:.1f} s ({report.frames / report.seconds:,.0f} frames/s); "
        f"{report.replies:,} {'responses' if kafka else 'calls answered'}"
    )
    if isinstance(report, KafkaFuzzReport):
        print(
            f"connections closed by the fuzzer, a request rightly held longer: {report.held_back}"
        )
    print("mutations: " + ", ".join(f"{k} {v:,}" for k, v in report.mutations.most_common()))
    print("refusals seen: " + ", ".join(f"{k} {report.answers[k]:,}" for k in report.failure_kinds))
    print(f"bystander: {report.heartbeats:,} heartbeats, slowest {report.heartbeat_max_ms:.0f} ms")
    print(f"server: {'alive' if alive else 'DEAD'} at the end, peak RSS {rss:.0f} MiB")
    print(f"crashes (error lines in the server's log): {len(errors)}")
    print(f"violations: {len(report.violations)}")
    for line in [*errors[:5], *report.violations[:5]]:
        print(f"  {line[:300]}")
    return 0 if alive and not errors and not report.violations else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wire", choices=("huddle", "kafka"), default="huddle")
    return parser.parse_args(argv)


if __name__ == "__main__":
    quiet_logs()
    sys.exit(main(parse()))
