"""``huddle sim run`` and ``huddle sim replay``: many seeds with a summary, or one seed's log."""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from huddle.sim.faults import KINDS
from huddle.sim.planted import BUGS
from huddle.sim.shrink import shrink
from huddle.sim.world import PROTOCOLS, Outcome, SimConfig, default_kinds, simulate

DEFAULTS = SimConfig()


def add_arguments(sim: argparse.ArgumentParser) -> None:
    actions = sim.add_subparsers(dest="sim_action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        help="run many seeds and summarise them per protocol",
        description="Run seeds FIRST..FIRST+SEEDS-1 for each protocol. Every invariant is "
        "checked after every step; the first violation of a protocol is shrunk and printed "
        "with the command that replays it. Exit 1 if any seed broke an invariant.",
    )
    run.add_argument("--seeds", type=_positive, default=100, help="seeds per protocol")
    run.add_argument("--first-seed", type=int, default=0, metavar="FIRST")
    run.add_argument(
        "--jobs", type=_positive, default=1, help="processes to run seeds in (results are the same)"
    )
    _add_world(run, protocols=True)
    replay = actions.add_parser(
        "replay",
        help="run one seed again and print its step-by-step log",
        description="Run SEED as `huddle sim run` did (give the same options) and print "
        "every step: faults, requests, answers and callbacks.",
    )
    replay.add_argument("seed", type=int, metavar="SEED")
    _add_world(replay, protocols=False)
    replay.add_argument(
        "--keep",
        type=_numbers,
        default=None,
        help="only these faults of the seed's plan, e.g. 3,7 (as a shrunk run prints)",
    )


def _add_world(p: argparse.ArgumentParser, *, protocols: bool) -> None:
    if protocols:
        p.add_argument(
            "--protocol",
            type=_protocols,
            default=PROTOCOLS,
            help=f"comma-separated, from {', '.join(PROTOCOLS)} (default: all)",
        )
    else:
        p.add_argument("--protocol", choices=PROTOCOLS, default=DEFAULTS.protocol)
    p.add_argument("--members", type=_positive, default=DEFAULTS.members)
    p.add_argument("--partitions", type=_positive, default=DEFAULTS.partitions)
    p.add_argument("--faults", type=_non_negative, default=DEFAULTS.faults, help="per run")
    p.add_argument(
        "--kinds",
        type=_kinds,
        default=None,
        help=f"fault kinds, comma-separated, from {', '.join(KINDS)} (default: all)",
    )
    p.add_argument(
        "--plant",
        type=_planted,
        default=(),
        help=f"plant known bugs (to see them found), comma-separated: {', '.join(sorted(BUGS))}",
    )


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not at least 1")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _listed(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or repr(text)}; known: {', '.join(known)}"
        )
    return names


def _protocols(text: str) -> tuple[str, ...]:
    return _listed(text, PROTOCOLS, "protocol")


def _kinds(text: str) -> tuple[str, ...]:
    return _listed(text, KINDS, "fault kind")


def _planted(text: str) -> tuple[str, ...]:
    return _listed(text, sorted(BUGS), "planted bug")


def _numbers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of fault numbers") from None


def _config(args: argparse.Namespace, protocol: str) -> SimConfig:
    return SimConfig(
        protocol=protocol,
        members=args.members,
        partitions=args.partitions,
        faults=args.faults,
        kinds=default_kinds(protocol) if args.kinds is None else tuple(args.kinds),
        plant=tuple(args.plant),
    )


def replay_command(seed: int, config: SimConfig, keep: Sequence[int] | None = None) -> str:
    """The command that runs ``seed`` again, step by step."""
    words = ["huddle", "sim", "replay", str(seed), "--protocol", config.protocol]
    for name in ("members", "partitions", "faults"):
        value = getattr(config, name)
        if value != getattr(DEFAULTS, name):
            words += [f"--{name}", str(value)]
    if config.kinds != default_kinds(config.protocol):
        words += ["--kinds", ",".join(config.kinds)]
    if config.plant:
        words += ["--plant", ",".join(config.plant)]
    if keep is not None:
        words += ["--keep", ",".join(map(str, keep)) or '""']
    return " ".join(words)


@dataclass
class Tally:
    """One protocol's seeds."""

    protocol: str
    seeds: int = 0
    violations: int = 0
    seconds: float = 0.0
    steps: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    rebalances: int = 0
    convergence_ms: list[float] = field(default_factory=list)
    first: Outcome | None = None

    def add(self, outcome: Outcome) -> None:
        self.seeds += 1
        self.steps += outcome.steps
        self.faults.update(outcome.faults)
        self.rebalances += outcome.rebalances
        if outcome.converged_after_ms is not None:
            self.convergence_ms.append(outcome.converged_after_ms)
        if outcome.violation is not None:
            self.violations += 1
            if self.first is None:
                self.first = outcome

    def summary(self) -> str:
        rate = self.seeds / self.seconds if self.seconds else 0.0
        parts = [
            f"{self.protocol:<21} {self.seeds} seeds, {self.violations} violations",
            f"{rate:.0f} seeds/s",
            f"{sum(self.faults.values())} faults",
            f"{self.rebalances} rebalances",
        ]
        if self.convergence_ms:
            ms = sorted(self.convergence_ms)
            p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
            parts.append(
                f"converged after the last fault in {statistics.median(ms) / 1000:.1f} s "
                f"median, {p99 / 1000:.1f} s p99, {ms[-1] / 1000:.1f} s max"
            )
        return ", ".join(parts)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _one(job: tuple[int, SimConfig]) -> Outcome:
    seed, config = job
    return simulate(seed, config)


def run_many(
    config: SimConfig, first: int, count: int, jobs: int = 1
) -> Generator[Outcome, None, None]:
    """The outcomes of seeds ``first``.. in seed order, run in ``jobs`` processes. A caller
    that stops early closes it (``contextlib.closing``), so the pool ends then and there,
    not whenever the generator is collected (a pool terminated from a collection can hang)."""
    work = ((seed, config) for seed in range(first, first + count))
    if jobs == 1:
        yield from map(_one, work)
        return
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        yield from pool.imap(_one, work, chunksize=8)


def run_seeds(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    first = args.first_seed
    out.write(
        f"huddle sim: {args.seeds} seeds per protocol ({first}..{first + args.seeds - 1}), "
        f"{args.members} members x {args.partitions} partitions, {args.faults} faults per "
        f"run; CPU {cpu_model()}\n"
    )
    if args.plant:
        out.write(f"planted bugs: {', '.join(args.plant)}\n")
    tallies = []
    for protocol in args.protocol:
        config = _config(args, protocol)
        tally = Tally(protocol)
        step = max(args.seeds // 10, 1)
        started = time.perf_counter()
        for done, outcome in enumerate(run_many(config, first, args.seeds, args.jobs), 1):
            tally.add(outcome)
            if done % step == 0 or tally.first is outcome:
                err.write(
                    f"  {protocol}: {done}/{args.seeds} seeds, {tally.violations} violations\n"
                )
        tally.seconds = time.perf_counter() - started
        out.write(tally.summary() + "\n")
        if tally.first is not None:
            report_violation(tally.first, config, out)
        tallies.append(tally)
    return 1 if any(t.violations for t in tallies) else 0


def report_violation(failed: Outcome, config: SimConfig, out: TextIO) -> None:
    violation = failed.violation
    assert violation is not None
    out.write(
        f"  VIOLATION seed {failed.seed}: {violation.invariant}: {violation.detail}\n"
        f"    at {violation.at_ms / 1000:.3f} s, step {violation.step}, "
        f"{len(failed.kept)} faults\n"
    )
    shrunk = shrink(failed.seed, config, failed)
    shown = shrunk.violation
    assert shown is not None
    out.write(f"  shrunk: {len(shrunk.kept)} faults, {shown.step} steps: {shown.detail}\n")
    by_number = {f.number: f for f in shrunk.plan}
    for number in shrunk.kept:
        out.write(f"    {by_number[number].describe()}\n")
    out.write(f"  replay: {replay_command(failed.seed, config, shrunk.kept)}\n")


def replay(args: argparse.Namespace, out: TextIO) -> int:
    config = _config(args, args.protocol)
    keep = list(args.keep) if args.keep is not None else None

    def tracer(line: str) -> None:
        out.write(line + "\n")

    outcome = simulate(args.seed, config, keep=keep, tracer=tracer)
    plan = {f.number: f for f in outcome.plan}
    out.write(f"seed {args.seed}, {config.protocol}: {len(outcome.kept)} faults\n")
    for number in outcome.kept:
        out.write(f"  {plan[number].describe()}\n")
    out.write(
        f"{outcome.steps} steps, {outcome.sim_ms / 1000:.3f} s simulated, digest {outcome.digest}\n"
    )
    if outcome.violation is None:
        after = outcome.converged_after_ms or 0.0
        out.write(f"no violation; converged {after / 1000:.1f} s after the last fault\n")
        return 0
    v = outcome.violation
    out.write(f"VIOLATION {v.invariant}: {v.detail} (at {v.at_ms / 1000:.3f} s, step {v.step})\n")
    return 1


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.sim_action == "run":
        return run_seeds(args, sys.stdout, sys.stderr)
    return replay(args, sys.stdout)


__all__ = ["add_arguments", "replay_command", "run"]
