"""What running as a cluster on etcd costs and buys, against one node, in the same run.

Two sections (``--sections commits,scale``):

* ``commits``: the round trip of one connection's offset commit (10 partitions, one in
  flight) and commits/s of 10 and 100 connections committing back to back, each for its own
  group, against one ``huddle serve --data-dir`` (with and without ``--fsync``), a
  one-node cluster and a three-node cluster (each committer talks to its group's owner).
  A cluster node acknowledges a commit once etcd has accepted the fenced transaction.
* ``scale``: ``--members`` members (10,000) in ``--groups`` groups (1,000) heartbeating
  every second, on one node and spread over a three-node cluster: heartbeats/s each node
  answers, its CPU and memory; then the rebalance of sampled groups when one member joins
  (until every member has synced the new generation), p50 and max.

    python -m bench.cluster [--sections commits,scale] [--rounds 3]
    python -m bench.cluster --sections commits --compare ../main-checkout --loads 100

``--compare`` runs the one node with ``--fsync`` and the three-node cluster both from another
checkout (a git worktree of main, in this virtualenv) and from this one, in turn each round,
and prints the ratios. ``--profile DIR`` records one node of each cluster with ``py-spy``
while the most committers commit (``DIR/<setup>-<round>.txt``, collapsed stacks: read them
with ``python -m bench.profile_summary``).

Needs the ``etcd`` binary (``apt-get install etcd-server``). Prints the CPU model.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import quiet_logs
from bench.failover import start_etcd
from bench.journal import PARTITIONS, commit_request
from bench.processes import (
    HOST,
    ServerProcess,
    checkout_env,
    cpu_seconds,
    huddle_serve,
    new_event_loop,
    server_process,
)
from bench.rawclient import MemberSettings, RawConnection, RawMember, close_all, open_connection
from bench.rebalance import Tracker
from huddle.protocol.errors import ErrorCode, error_name
from huddle.protocol.messages import (
    CreateTopicsRequest,
    DescribeClusterRequest,
    DescribeClusterResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetCommitResponse,
    TopicSpec,
)
from huddle.sim.cli import cpu_model

SHARDS = 50
PROFILE: list[Path] = []  # --profile: where py-spy's recordings go
ETCD_PIDS: dict[int, int] = {}  # the etcd started, by port: its CPU is counted too
READY_S = 60.0


@dataclass
class Setup:
    """One way of running huddle: a list of server processes (one or a cluster)."""

    name: str
    ports: list[int]
    pids: list[int]
    cpu_per_commit: list[float] = field(default_factory=list)  # its servers', each run
    store_pid: int | None = None  # the etcd a cluster writes to
    store_cpu_per_commit: list[float] = field(default_factory=list)  # etcd's, each run


# --- starting what is measured ------------------------------------------------------------


@contextlib.contextmanager
def single(name: str, *flags: str, env: dict[str, str] | None = None) -> Iterator[Setup]:
    with server_process(name, huddle_serve(*flags), env=env) as server:
        yield Setup(name, [server.port], [server.pid])


@contextlib.contextmanager
def cluster(
    name: str, etcd_port: int, nodes: int, prefix: str, env: dict[str, str] | None = None
) -> Iterator[Setup]:
    flags = (
        "--log-level", "error",
        "--cluster", f"etcd://{HOST}:{etcd_port}", "--cluster-prefix", prefix,
        "--shards", str(SHARDS),
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        servers: list[ServerProcess] = [
            stack.enter_context(server_process(f"{name}-{i}", huddle_serve(*flags), env=env))
            for i in range(nodes)
        ]
        setup = Setup(name, [s.port for s in servers], [s.pid for s in servers])
        setup.store_pid = ETCD_PIDS.get(etcd_port)
        asyncio.get_event_loop().run_until_complete(settled(setup))
        yield setup


async def settled(setup: Setup) -> None:
    """Until every node sees all nodes and every shard owned, evenly spread."""
    deadline = time.monotonic() + READY_S
    want = len(setup.ports)
    while True:
        views = []
        for port in setup.ports:
            with contextlib.suppress(Exception):
                conn = await open_connection(port, "bench-ready")
                try:
                    views.append(await conn.call(DescribeClusterRequest(), timeout=2))
                finally:
                    await conn.close()
        if len(views) == want and all(ready(v, want) for v in views):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{setup.name}: shards not spread over {want} nodes")
        await asyncio.sleep(0.2)


def ready(view: object, nodes: int) -> bool:
    if not isinstance(view, DescribeClusterResponse) or view.error_code != ErrorCode.NONE:
        return False
    owners = [s.owner for s in view.shards]
    counts = [owners.count(n.node_id) for n in view.nodes]
    return (
        len(view.nodes) == nodes
        and all(owners)
        and len(owners) == view.shard_count
        and max(counts) - min(counts) <= 1
    )


async def owner_port(conn: RawConnection, group_id: str) -> int:
    """The port of the node coordinating ``group_id`` (one node answers with itself)."""
    deadline = time.monotonic() + READY_S
    while True:
        answer = await conn.call(FindCoordinatorRequest(group_id=group_id))
        if isinstance(answer, FindCoordinatorResponse) and answer.error_code == ErrorCode.NONE:
            return answer.port
        if time.monotonic() > deadline:
            raise RuntimeError(f"no coordinator for {group_id}: {answer}")
        await asyncio.sleep(0.05)


# --- commits --------------------------------------------------------------------------------


async def committed(conn: RawConnection, group_id: str, offset: int) -> None:
    """Commit once, waiting out a shard still loading or a topic not yet seen."""
    deadline = time.monotonic() + READY_S
    while True:
        answer = await conn.call(commit_request(offset, group_id))
        codes = (
            {p.error_code for t in answer.topics for p in t.partitions}
            if isinstance(answer, OffsetCommitResponse)
            else {getattr(answer, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)}
        )
        if codes == {ErrorCode.NONE}:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"commit for {group_id}: {[error_name(c) for c in codes]}")
        await asyncio.sleep(0.05)


async def committers(setup: Setup, groups: list[str]) -> list[RawConnection]:
    """A connection per group, to its owner, with a first commit accepted."""
    any_node = await open_connection(setup.ports[0], "bench-admin")
    try:
        topic = TopicSpec(name="t", partitions=PARTITIONS)
        await any_node.call(CreateTopicsRequest(topics=[topic]))
        ports = [await owner_port(any_node, g) for g in groups]
    finally:
        await any_node.close()
    conns = [await open_connection(p, f"committer-{i}") for i, p in enumerate(ports)]
    await asyncio.gather(*(committed(c, g, 0) for c, g in zip(conns, groups, strict=True)))
    return conns


async def round_trip(setup: Setup, commits: int) -> float:
    (conn,) = await committers(setup, ["bench-rt"])
    try:
        times = []
        for i in range(1, commits + 1):
            start = time.perf_counter()
            answer = await conn.call(commit_request(i, "bench-rt"))
            times.append(time.perf_counter() - start)
            assert isinstance(answer, OffsetCommitResponse), answer
            assert all(p.error_code == 0 for t in answer.topics for p in t.partitions), answer
        return statistics.median(times)
    finally:
        await conn.close()


async def throughput(setup: Setup, connections: int, seconds: float) -> float:
    groups = [f"bench-c{connections}-{i}" for i in range(connections)]
    conns = await committers(setup, groups)
    done = 0
    stop = time.perf_counter() + seconds

    async def one(conn: RawConnection, group_id: str) -> None:
        nonlocal done
        offset = 1
        while time.perf_counter() < stop:
            answer = await conn.call(commit_request(offset, group_id))
            assert isinstance(answer, OffsetCommitResponse), answer
            offset += 1
            done += 1

    store = [setup.store_pid] if setup.store_pid is not None else []
    spy = recording(setup, seconds) if PROFILE and len(setup.pids) > 1 else None
    try:
        cpu = sum(map(cpu_seconds, setup.pids))
        store_cpu = sum(map(cpu_seconds, store))
        started = time.perf_counter()
        await asyncio.gather(*(one(c, g) for c, g in zip(conns, groups, strict=True)))
        elapsed = time.perf_counter() - started
        setup.cpu_per_commit.append((sum(map(cpu_seconds, setup.pids)) - cpu) / max(done, 1))
        used = sum(map(cpu_seconds, store)) - store_cpu
        setup.store_cpu_per_commit.append(used / max(done, 1))
        return done / elapsed
    finally:
        if spy is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(seconds + 10)
        await close_all(conns)


def recording(setup: Setup, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy recording the first node for ``seconds`` (the last load's recording wins)."""
    here = Path(sys.executable).with_name("py-spy")
    spy = here if here.exists() else shutil.which("py-spy") or "py-spy"
    out = PROFILE[0] / f"{setup.name}.txt"
    command = [str(spy), "record", "--pid", str(setup.pids[0]), "--duration", str(int(seconds))]
    command += ["--format", "raw", "--nonblocking", "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


Starter = Callable[[int], contextlib.AbstractContextManager[Setup]]


def commits_section(
    etcd_port: int,
    tmp: str,
    rounds: int,
    commits: int,
    seconds: float,
    loads: Sequence[int] = (1, 10, 100),
    before: dict[str, str] | None = None,
) -> None:
    """Every setup in turn, each round; with ``before`` (the environment of another
    checkout: ``--compare``) the one node with ``--fsync`` and the three-node cluster, each
    run from that checkout and from this one."""
    setups: dict[str, Starter] = {
        "one node, --data-dir": lambda r: single("dd", "--data-dir", f"{tmp}/dd{r}"),
        "one node, --data-dir --fsync": lambda r: single(
            "fs", "--data-dir", f"{tmp}/fs{r}", "--fsync"
        ),
        "cluster of 1 node": lambda r: cluster("c1", etcd_port, 1, f"/bench/c1-{r}"),
        "cluster of 3 nodes": lambda r: cluster("c3", etcd_port, 3, f"/bench/c3-{r}"),
    }
    if before is not None:
        setups = compared(etcd_port, tmp, before)
    rtt: dict[str, list[float]] = {n: [] for n in setups}
    rate: dict[tuple[str, int], list[float]] = {(n, c): [] for n in setups for c in loads}
    cpu: dict[str, list[float]] = {n: [] for n in setups}  # at the most committers
    store_cpu: dict[str, list[float]] = {n: [] for n in setups}
    loop = asyncio.get_event_loop()
    for r in range(rounds):
        for name, start in setups.items():
            with start(r) as setup:
                rtt[name].append(loop.run_until_complete(round_trip(setup, commits)))
                for c in loads:
                    rate[name, c].append(loop.run_until_complete(throughput(setup, c, seconds)))
                cpu[name].append(setup.cpu_per_commit[-1])
                store_cpu[name].append(setup.store_cpu_per_commit[-1])
            print(f"  round {r + 1}/{rounds}: {name} done", flush=True)
    base = statistics.median(rtt[next(iter(setups))])
    print(f"\ncommits, {PARTITIONS} partitions each, median of {rounds} rounds; CPU: {cpu_model()}")
    head = "".join(f"{c:>7} conn" for c in loads)
    print(f"  {'':36} {'round trip':>12} {'x':>6}   {head}   CPU/commit")
    for name in setups:
        m = statistics.median(rtt[name])
        rates = "".join(f"{statistics.median(rate[name, c]):>12,.0f}" for c in loads)
        used = statistics.median(cpu[name]) * 1e6
        etcd = statistics.median(store_cpu[name]) * 1e6
        also = f" + etcd {etcd:5.1f} us" if etcd else ""
        print(f"  {name:36} {m * 1e6:9.0f} us {m / base:6.2f}   {rates}   {used:7.1f} us{also}")
    print("  (commits/s: that many connections committing back to back, each its own group;")
    print(f"   CPU/commit: the servers' CPU time (user + system) a commit at {loads[-1]} conn)")
    if before is not None:
        ratios(rate, loads)
        fs = [statistics.median(cpu[f"one node, --fsync ({w})"]) for w in ("before", "now")]
        c3 = [statistics.median(cpu[f"cluster of 3 nodes ({w})"]) for w in ("before", "now")]
        print(
            f"  CPU/commit now/before: one node --fsync {fs[1] / fs[0]:.2f}x, "
            f"cluster {c3[1] / c3[0]:.2f}x"
        )


def compared(etcd_port: int, tmp: str, before: dict[str, str]) -> dict[str, Starter]:
    """The one node with ``--fsync`` and the three-node cluster, before and now, in turn."""

    def one(when: str, env: dict[str, str] | None) -> Starter:
        return lambda r: single(
            f"fs-{when}", "--data-dir", f"{tmp}/fs-{when}{r}", "--fsync", env=env
        )

    def three(when: str, env: dict[str, str] | None) -> Starter:
        return lambda r: cluster(f"c3-{when}", etcd_port, 3, f"/bench/c3-{when}-{r}", env=env)

    setups: dict[str, Starter] = {}
    for when, env in (("before", before), ("now", None)):
        setups[f"one node, --fsync ({when})"] = one(when, env)
        setups[f"cluster of 3 nodes ({when})"] = three(when, env)
    return setups


def ratios(rate: dict[tuple[str, int], list[float]], loads: Sequence[int]) -> None:
    def median(name: str, c: int) -> float:
        return statistics.median(rate[name, c])

    for c in loads:
        fs = {w: median(f"one node, --fsync ({w})", c) for w in ("before", "now")}
        c3 = {w: median(f"cluster of 3 nodes ({w})", c) for w in ("before", "now")}
        print(
            f"  {c:>3} conn: one node --fsync now/before {fs['now'] / fs['before']:.2f}x, "
            f"cluster now/before {c3['now'] / c3['before']:.2f}x; cluster of one node "
            f"--fsync: before {c3['before'] / fs['before']:.0%}, now {c3['now'] / fs['now']:.0%}"
        )


# --- scale ------------------------------------------------------------------------------------


@dataclass
class Node:
    port: int
    pid: int
    conns: list[RawConnection] = field(default_factory=list)
    members: list[RawMember] = field(default_factory=list)
    groups: int = 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class ScaleResult:
    heartbeats: list[float]  # answered per second, per node
    cpu: list[float]  # CPU share of one core, per node
    rss: list[float]  # MiB per node
    members: list[int]
    groups: list[int]
    join_ms: list[float]
    errors: dict[str, int]


async def scale(setup: Setup, args: argparse.Namespace) -> ScaleResult:
    loop = asyncio.get_running_loop()
    nodes = {p: Node(p, pid) for p, pid in zip(setup.ports, setup.pids, strict=True)}
    per_group = args.members // args.groups
    any_node = await open_connection(setup.ports[0], "bench-admin")
    group_ids = [f"scale-{g}" for g in range(args.groups)]
    owners = {g: await owner_port(any_node, g) for g in group_ids}
    await any_node.close()
    trackers = {g: Tracker() for g in group_ids}
    for node in nodes.values():
        mine = [g for g in group_ids if owners[g] == node.port]
        node.groups = len(mine)
        count = len(mine) * per_group
        node.conns = [
            await open_connection(node.port, f"scale-{i}")
            for i in range(-(-count // args.members_per_connection))
        ]
        for i in range(count):
            group = mine[i // per_group]
            settings = MemberSettings(
                group_id=group,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=60_000,
                heartbeat_interval_ms=1_000,
            )
            conn = node.conns[i // args.members_per_connection]
            node.members.append(RawMember(conn, settings, on_synced=trackers[group].synced))
    members = [m for n in nodes.values() for m in n.members]
    until = loop.time() + 3_600
    for tracker in trackers.values():
        tracker.arm(per_group, 0)
    tasks = [asyncio.create_task(trackers[m.settings.group_id].live(m, until)) for m in members]
    try:
        await asyncio.wait_for(
            asyncio.gather(*(t.done.wait() for t in trackers.values())), READY_S * 2
        )
        for tracker in trackers.values():
            if tracker.error is not None:
                raise RuntimeError(f"a member failed: {tracker.error}")
        print(f"    {len(members):,} members formed {len(trackers):,} groups", flush=True)
        await asyncio.sleep(2.0)  # heartbeat phases spread
        before = {
            p: (sum(m.heartbeats for m in n.members), cpu_seconds(n.pid)) for p, n in nodes.items()
        }
        started = time.perf_counter()
        await asyncio.sleep(args.seconds)
        elapsed = time.perf_counter() - started
        heartbeats, cpu, rss = [], [], []
        for p, n in nodes.items():
            beats, seconds = before[p]
            heartbeats.append((sum(m.heartbeats for m in n.members) - beats) / elapsed)
            cpu.append((cpu_seconds(n.pid) - seconds) / elapsed)
            rss.append(rss_mib(n.pid))
        failed = sum(1 for t in tasks if t.done())
        print(
            f"    heartbeats/s per node: {[round(h) for h in heartbeats]}, CPU "
            f"{[f'{c:.0%}' for c in cpu]}; members stopped: {failed}; "
            f"{args.samples} rebalances next",
            flush=True,
        )
        join_ms = []
        for i, g in enumerate(group_ids[: args.samples]):
            try:
                took = await one_join(owners[g], g, trackers[g], per_group, until)
            except Exception as exc:
                print(f"    rebalance {i} of {g} failed: {exc!r}", flush=True)
                raise
            join_ms.append(took)
        errors: dict[str, int] = {}
        for m in members:
            for code, count in m.errors.items():
                errors[code] = errors.get(code, 0) + count
        return ScaleResult(
            heartbeats,
            cpu,
            rss,
            [len(n.members) for n in nodes.values()],
            [n.groups for n in nodes.values()],
            join_ms,
            errors,
        )
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for n in nodes.values():
            await close_all(n.conns)


async def one_join(port: int, group_id: str, tracker: Tracker, size: int, until: float) -> float:
    """A member joins ``group_id``: ms until all ``size + 1`` have synced a new generation."""
    generation = max(tracker.counts)
    conn = await open_connection(port, "newcomer")
    settings = MemberSettings(
        group_id=group_id, session_timeout_ms=30_000, heartbeat_interval_ms=1_000
    )
    newcomer = RawMember(conn, settings, on_synced=tracker.synced)
    task = None
    try:
        tracker.arm(size + 1, generation)
        started = time.perf_counter()
        task = asyncio.create_task(tracker.live(newcomer, until))
        _, at = await tracker.wait()
        took = (at - started) * 1000
        tracker.arm(size, tracker.generation)
        await newcomer.leave()
        await tracker.wait()
        return took
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await conn.close()


def scale_section(etcd_port: int, args: argparse.Namespace) -> None:
    loop = asyncio.get_event_loop()
    results: dict[str, ScaleResult] = {}
    starts: dict[str, Callable[[], contextlib.AbstractContextManager[Setup]]] = {
        "one node": lambda: single("one"),
        "cluster of 3 nodes": lambda: cluster("s3", etcd_port, 3, "/bench/scale"),
    }
    for name, start in starts.items():
        with start() as setup:
            print(f"  {name}:", flush=True)
            results[name] = loop.run_until_complete(scale(setup, args))
    print(
        f"\n{args.members:,} members in {args.groups:,} groups, heartbeats every 1 s, "
        f"measured over {args.seconds:.0f} s; CPU: {cpu_model()}"
    )
    for name, r in results.items():
        print(f"  {name}:")
        for i in range(len(r.members)):
            per_beat = r.cpu[i] / r.heartbeats[i] * 1e6 if r.heartbeats[i] else 0.0
            print(
                f"    node {i}: {r.groups[i]:5,} groups {r.members[i]:6,} members  "
                f"{r.heartbeats[i]:7,.0f} heartbeats/s  CPU {r.cpu[i]:5.1%} "
                f"({per_beat:4.0f} us a heartbeat, all included)  RSS {r.rss[i]:6.1f} MiB"
            )
        j = r.join_ms
        print(
            f"    rebalance when a member joins a group of {args.members // args.groups} "
            f"({len(j)} groups): p50 {statistics.median(j):6.1f} ms  max {max(j):6.1f} ms"
            f"   errors answered: {r.errors or 'none'}"
        )
    one, three = results["one node"], results["cluster of 3 nodes"]
    print(
        f"  busiest node's CPU: {max(three.cpu) / max(one.cpu):.2f} of one node's;"
        f" rebalance p50: {statistics.median(three.join_ms) / statistics.median(one.join_ms):.2f}"
        " of one node's"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default="commits,scale")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--commit-seconds", type=float, default=2.0)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--members-per-connection", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--loads", default="1,10,100", help="committers, comma-separated")
    parser.add_argument(
        "--compare",
        type=Path,
        help="another checkout (a git worktree of main): the one node with --fsync and the "
        "three-node cluster run from it and from this one, in turn",
    )
    parser.add_argument("--profile", type=Path, help="py-spy recordings of a cluster node here")
    args = parser.parse_args(argv)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE.append(args.profile)
    quiet_logs()
    sections = set(args.sections.split(","))
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory(prefix="huddle-bench-cluster-") as tmp:
        etcd, etcd_port = start_etcd(Path(tmp))
        ETCD_PIDS[etcd_port] = etcd.pid
        try:
            if "commits" in sections:
                loads = [int(c) for c in args.loads.split(",")]
                before = None
                if args.compare is not None:
                    before = checkout_env(args.compare, Path(tmp) / "before")
                commits_section(
                    etcd_port, tmp, args.rounds, args.commits, args.commit_seconds, loads, before
                )
            if "scale" in sections:
                scale_section(etcd_port, args)
        finally:
            etcd.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                etcd.wait(10)
            loop.close()


if __name__ == "__main__":
    main()
