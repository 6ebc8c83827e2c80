"""Deterministic simulation: seeds per second and outcomes per protocol, and how many seeds it
takes to find each planted bug.

    python -m bench.sim [--seeds 10000] [--jobs 2] [--planted-seeds 2000]
    python -m bench.sim --trace-digests 300    # one digest per protocol of every step's trace
    python -m bench.sim --against PATH [--single 60] [--rounds 3]

Runs 8 members x 32 partitions with 20 faults per run (the defaults of ``huddle sim run``).
Seeds/s is measured twice in the same run: in one process, and over ``--jobs`` processes.
``--trace-digests N`` hashes the full step log of seeds 0..N-1 (what ``huddle sim replay``
prints: every request, answer, callback, fault and member log line, with its time) and each
outcome, one digest per protocol: a change that keeps them keeps every run as it was.
``--against PATH`` measures the one-process rate of this checkout and of the huddle found on
PATH (a PYTHONPATH: another checkout's source folders, or a compiled build), in turns, in
the same run: the medians and their ratio per protocol, per second of CPU time (a shared
machine's other work slows the wall clock of both, not their CPU time).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing

from huddle.sim import PROTOCOLS
from huddle.sim.cli import Tally, cpu_model, run_many
from huddle.sim.planted import BUGS
from huddle.sim.world import config_for, simulate

# The protocol each planted bug concerns first (the others are tried after it).
CONCERNS = {
    "commit-fencing-off": "cooperative-sticky",
    "tie-handed-out": "cooperative-sticky",
    "session-from-receive-time": "cooperative-sticky",
    "leader-check-skipped": "cooperative-sticky",
    "heartbeats-paused-in-callbacks": "cooperative-sticky",
    "consumer-released-unchecked": "consumer",
    "consumer-fenced-keeps": "consumer",
}


def seeds_per_second(
    protocol: str, seeds: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """One process, the first ``seeds`` seeds (per second of ``clock``)."""
    started = clock()
    for _ in run_many(config_for(protocol), 0, seeds, 1):
        pass
    return seeds / (clock() - started)


def trace_digest(protocol: str, seeds: int) -> str:
    """One digest of the step logs and outcomes of seeds 0..``seeds``-1."""
    digest = hashlib.blake2b(digest_size=16)
    for seed in range(seeds):
        o = simulate(seed, config_for(protocol), tracer=lambda line: digest.update(line.encode()))
        v = o.violation
        told = f"{seed} {o.steps} {o.sim_ms!r} {o.digest} {o.rebalances} {o.converged_after_ms!r}"
        digest.update(f"{told} {v and (v.invariant, v.detail, v.step)}\n".encode())
    return digest.hexdigest()


def rate_in_child(protocol: str, seeds: int, path: str | None) -> float:
    """``seeds_per_second`` in a fresh interpreter, importing huddle from ``path`` if given."""
    env = dict(os.environ)
    if path is not None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([path, here])  # that huddle, this bench
    command = [sys.executable, "-m", "bench.sim", "--rate", protocol, "--single", str(seeds)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout)


def against(path: str, seeds: int, rounds: int) -> None:
    """This checkout's one-process rate and that of the huddle on ``path``, in turns."""
    print(f"CPU: {cpu_model()}; one process, {seeds} seeds, {rounds} rounds, in turns")
    print("(seeds per second of the process's CPU time: other work on the machine counts less)")
    for protocol in PROTOCOLS:
        here: list[float] = []
        there: list[float] = []
        for n in range(rounds):
            order = [(here, None), (there, path)]
            for rates, where in order if n % 2 == 0 else order[::-1]:
                rates.append(rate_in_child(protocol, seeds, where))
        a, b = statistics.median(here), statistics.median(there)
        print(f"  {protocol:<21} this {a:6.1f}  {path}: {b:6.1f} seeds/s  ({b / a:.2f}x)")


def find(bug: str, protocol: str, limit: int, jobs: int) -> tuple[int, str] | None:
    """The first seed (and invariant) that finds ``bug`` planted, within ``limit`` seeds."""
    config = config_for(protocol, plant=(bug,))
    with closing(run_many(config, 0, limit, jobs)) as outcomes:  # its pool ends here
        for outcome in outcomes:
            if outcome.violation is not None:
                return outcome.seed, outcome.violation.invariant
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=10_000, help="per protocol")
    parser.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--planted-seeds", type=int, default=2_000)
    parser.add_argument("--single", type=int, default=300, help="seeds for the one-process rate")
    parser.add_argument(
        "--trace-digests", type=int, default=0, metavar="N", help="only print trace digests"
    )
    parser.add_argument("--against", metavar="PATH", help="compare with the huddle on PATH")
    parser.add_argument("--rounds", type=int, default=3, help="turns of --against")
    parser.add_argument("--rate", metavar="PROTOCOL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rate:  # one measurement, for --against
        simulate(0, config_for(args.rate))  # warm: imports and first-use caches
        print(seeds_per_second(args.rate, args.single, time.process_time))
        return
    if args.against:
        against(args.against, args.single, args.rounds)
        return
    if args.trace_digests:
        for protocol in PROTOCOLS:
            digest = trace_digest(protocol, args.trace_digests)
            print(f"{protocol:<21} {args.trace_digests} seeds {digest}")
        return
    print(f"CPU: {cpu_model()}, {multiprocessing.cpu_count()} cores; jobs {args.jobs}")
    print("8 members x 32 partitions, 20 faults per run")
    print(f"\none process, {args.single} seeds each:")
    for protocol in PROTOCOLS:
        print(f"  {protocol:<21} {seeds_per_second(protocol, args.single):6.1f} seeds/s")
    print(f"\n{args.seeds} seeds per protocol over {args.jobs} processes:")
    failed = False
    for protocol in PROTOCOLS:
        tally = Tally(protocol)
        started = time.perf_counter()
        for outcome in run_many(config_for(protocol), 0, args.seeds, args.jobs):
            tally.add(outcome)
        tally.seconds = time.perf_counter() - started
        print("  " + tally.summary())
        if tally.first is not None and tally.first.violation is not None:
            failed = True
            v = tally.first.violation
            print(f"    first violation: seed {tally.first.seed}: {v.invariant}: {v.detail}")
        if tally.convergence_ms:
            print(f"    mean convergence {statistics.mean(tally.convergence_ms) / 1000:.2f} s")
    print(f"\nplanted bugs, seeds until found (at most {args.planted_seeds}):")
    for bug in sorted(BUGS):
        first = CONCERNS[bug]
        order = [first] + [p for p in PROTOCOLS if p != first]
        for protocol in order:
            found = find(bug, protocol, args.planted_seeds, args.jobs)
            if found is not None:
                seed, invariant = found
                print(f"  {bug:<31} found by {protocol} at seed {seed} ({invariant})")
                break
        else:
            failed = True
            print(f"  {bug:<31} NOT found")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
