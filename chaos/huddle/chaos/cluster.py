"""A coordinator cluster for a chaos run: one etcd and three ``huddle serve --cluster``
nodes, as child processes, and the faults against them.

Each node reaches etcd through a fault proxy of its own (its *store link*) and advertises a
second one to its clients (its *client link*), so either link can be blackholed or reset.
Faults (scenario actions):

- ``owner_kill``, ``owner_stop``, ``owner_cont``: SIGKILL or SIGSTOP the node that owns the
  run's group; SIGCONT the node stopped last;
- ``etcd_stop``, ``etcd_cont``: SIGSTOP and SIGCONT etcd;
- ``etcd_kill``, ``etcd_start``: SIGKILL etcd; start it again on the same data dir and port;
- ``store_freeze``, ``store_reset``, ``store_heal``: blackhole the owner's store link, reset
  its connections (TCP resets, calls in flight), heal every store link;
- ``store_mute``: what the owner sends on its open connections to etcd is dropped for good,
  one way, without a reset (a link that died silently; new connections flow);
- ``client_freeze``, ``client_heal``: blackhole the owner's client link; heal them all.

After each heal (``owner_cont``, ``etcd_cont``, ``etcd_start``, ``store_reset``,
``store_mute``, ``store_heal``, ``client_heal``: a reset or a mute is its own heal) the
cluster measures how long until etcd answers, then how long until every shard is served
again (a ``shards_served`` event): a shard is served when some node answers a group request
for a group of that shard (not NOT_COORDINATOR, not loading). A shard not served again
within the lease TTL plus ``SERVED_SLACK_S`` is a violation; ``check`` fails the run with
them.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from huddle.chaos import events as ev
from huddle.chaos.etcdproc import EtcdError, EtcdProcess
from huddle.chaos.events import EventLog
from huddle.chaos.procs import HOST, signal_pid, spawn
from huddle.chaos.proxy import FaultProxy, fault_proxy
from huddle.chaos.scenarios import CLUSTER_LEASE_S, ScenarioError
from huddle.client.connection import connect
from huddle.client.discovery import coordinator_of
from huddle.coordinator.cluster.shards import shard_of
from huddle.protocol.addresses import free_port
from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import OffsetFetchRequest

NODES = 3
SHARDS = 12
SERVED_SLACK_S = 5.0  # every shard served again within the lease TTL and this, after a heal
ANSWER_WAIT_S = 30.0  # etcd answers again within this after a heal
SERVED_WAIT_S = 60.0  # how long a late recovery is still measured
POLL_S = 0.05
HEALS = frozenset(
    {
        "owner_cont",
        "etcd_cont",
        "etcd_start",
        "store_reset",
        "store_mute",
        "store_heal",
        "client_heal",
    }
)


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[bytes]
    port: int  # where it listens
    store: FaultProxy  # its link to etcd
    client: FaultProxy  # its link to clients: the address it advertises
    kafka_port: int = 0  # its Kafka listener (a run with Kafka clients), else 0


def probe_groups(shards: int) -> dict[int, str]:
    """A group id of each shard: asking a node about it tells whether the shard is served."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < shards:
        found.setdefault(shard_of(f"probe-{i}", shards), f"probe-{i}")
        i += 1
    return found


class ChaosCluster:
    def __init__(
        self,
        run_dir: Path,
        events_dir: Path,
        huddle_argv: list[str],
        started: list[subprocess.Popen[bytes]],
        *,
        shards: int = SHARDS,
        lease_s: float = CLUSTER_LEASE_S,
        events: EventLog | None = None,
        progress: Callable[[str], None] | None = None,
        kafka: bool = False,
        serve_flags: Sequence[str] = (),
    ) -> None:
        self.run_dir = run_dir
        self.kafka = kafka  # every node opens a Kafka listener too (not through a proxy)
        self.serve_flags = list(serve_flags)  # more serve flags for every node (consumer timers)
        self.events_dir = events_dir
        self.huddle_argv = huddle_argv
        self.shards = shards
        self.lease_s = lease_s
        self.bound_s = lease_s + SERVED_SLACK_S
        self.events = events
        self.progress = progress or (lambda line: None)
        self.etcd: EtcdProcess | None = None
        self.nodes: dict[int, Node] = {}  # advertised port -> node
        self.stopped: list[subprocess.Popen[bytes]] = []
        self.started = started  # the harness stops every one at the end
        self.probes = probe_groups(shards)
        self.recoveries: list[tuple[str, float | None, float | None]] = []
        self.violations: list[str] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{port}" for port in self.nodes)

    @property
    def kafka_bootstrap(self) -> str:
        """The nodes' Kafka listeners (a run with ``kafka``)."""
        return ",".join(f"{HOST}:{n.kafka_port}" for n in self.nodes.values() if n.kafka_port)

    @asynccontextmanager
    async def running(self, group: str, disconnect_grace_ms: int) -> AsyncIterator[ChaosCluster]:
        """etcd and the nodes started, their proxies relaying, until the block is left."""
        try:
            self.etcd = EtcdProcess(
                self.run_dir / "etcd", self.run_dir / "logs" / "etcd.log", self.started
            )
            await self.etcd.start()
        except EtcdError as exc:
            raise ScenarioError(str(exc)) from None
        async with AsyncExitStack() as stack:
            for i in range(1, NODES + 1):
                store = await stack.enter_async_context(fault_proxy(HOST, self.etcd.port))
                port = free_port()
                client = await stack.enter_async_context(fault_proxy(HOST, port))
                kafka_port = free_port() if self.kafka else 0
                flags = (
                    ["--kafka-host", HOST, "--kafka-port", str(kafka_port)] if self.kafka else []
                )
                flags += self.serve_flags
                proc = self._spawn(
                    [
                        *self.huddle_argv, "serve", "--host", HOST, "--port", str(port),
                        "--advertise", f"{HOST}:{client.port}",
                        "--node-id", f"node-{i}", "--log-format", "json",
                        "--cluster", f"etcd://{HOST}:{store.port}", "--cluster-prefix", "/chaos",
                        "--shards", str(self.shards), "--lease-ttl-s", str(int(self.lease_s)),
                        "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "500",
                        "--disconnect-grace-ms", str(disconnect_grace_ms), *flags,
                    ],
                    f"coordinator-node-{i}",
                )  # fmt: skip
                self.nodes[client.port] = Node(f"node-{i}", proc, port, store, client, kafka_port)
                for listening in (port, kafka_port) if self.kafka else (port,):
                    await _listening(listening, 20.0)
            with anyio.fail_after(30.0):
                while await self.owner(group) is None:  # noqa: ASYNC110 - other processes
                    await anyio.sleep(POLL_S)
            yield self

    def _spawn(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        proc = spawn(
            argv,
            stdout=self.run_dir / "logs" / f"{name}.log",
            stderr=self.events_dir / f"{name}.jsonl",
        )
        self.started.append(proc)
        return proc

    def _live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.proc.poll() is None]

    async def owner(self, group: str) -> Node | None:
        """The node that coordinates ``group``, as a live node says (asked directly)."""
        for node in self._live():
            if node.proc in self.stopped:
                continue
            try:
                async with connect(f"{HOST}:{node.port}", notices=False, timeout=1.0) as conn:
                    found = await coordinator_of(conn, group, 1.0)
            except Exception:
                continue
            return self.nodes.get(int(found.rsplit(":", 1)[1]))
        return None

    async def unserved(self) -> list[int]:
        """The shards no live node serves now (each node asked directly, not through its
        client link)."""
        served: set[int] = set()
        for node in self._live():
            if node.proc in self.stopped:
                continue
            try:
                with anyio.fail_after(2.0):
                    async with connect(f"{HOST}:{node.port}", notices=False, timeout=1.0) as conn:
                        for shard, group in self.probes.items():
                            if shard not in served:
                                answer = await conn.request(OffsetFetchRequest(group_id=group))
                                if getattr(answer, "error_code", None) == ErrorCode.NONE:
                                    served.add(shard)
            except Exception:
                continue
        return sorted(set(self.probes) - served)

    # --- faults ------------------------------------------------------------------------

    async def settle(self, action: str) -> None:
        """After a heal, until every shard is served again (or the measure gives up)."""
        if action in HEALS:
            await self.recovered(action)

    async def fault(self, action: str, group: str) -> str | None:
        """Apply ``action``; what was done, or None if nothing."""
        etcd = self.etcd
        assert etcd is not None
        match action:
            case "etcd_stop":
                return f"etcd pid {etcd.proc.pid if etcd.proc else '-'}" if etcd.freeze() else None
            case "etcd_cont":
                return "etcd thawed" if etcd.thaw() else None
            case "etcd_kill":
                return "etcd killed" if await etcd.kill() else None
            case "etcd_start":
                await etcd.start()
                return f"etcd started again on port {etcd.port}"
            case "store_heal" | "client_heal":
                for node in self.nodes.values():
                    (node.store if action == "store_heal" else node.client).heal()
                return "healed every link"
            case "owner_cont":
                if not self.stopped:
                    return None
                proc = self.stopped.pop()
                signal_pid(proc, signal.SIGCONT)
                return f"pid {proc.pid}"
        target = await self.owner(group) or next(iter(self._live()), None)
        if target is None:
            return None
        name = f"{target.name}, pid {target.proc.pid}"
        match action:
            case "owner_kill":
                signal_pid(target.proc, signal.SIGKILL)
            case "owner_stop":
                signal_pid(target.proc, signal.SIGSTOP)
                self.stopped.append(target.proc)
            case "store_freeze":
                target.store.stall()
            case "store_reset":
                return f"{name}: reset {await target.store.drop(reset=True)} connections to etcd"
            case "store_mute":
                return f"{name}: muted {target.store.abandon(one_way=True)} connections to etcd"
            case "client_freeze":
                target.client.stall()
            case _:
                raise ScenarioError(f"not a cluster fault: {action}")
        return name

    async def recovered(self, after: str) -> None:
        """How long after ``after`` (a heal) etcd answers, then every shard is served."""
        assert self.etcd is not None
        answering = await self.etcd.answering(ANSWER_WAIT_S)
        served: float | None = None
        left: list[int] = list(self.probes)
        if answering is not None:
            began = anyio.current_time()
            with anyio.move_on_after(SERVED_WAIT_S):
                while left := await self.unserved():  # noqa: ASYNC110 - other processes
                    await anyio.sleep(POLL_S)
                served = anyio.current_time() - began
        self.recoveries.append((after, answering, served))
        if self.events is not None:
            self.events.write(
                ev.ShardsServed(
                    after=after,
                    answering_s=answering,
                    served_s=served,
                    bound_s=self.bound_s,
                    unserved=left,
                )
            )
        if served is None or served > self.bound_s:
            what = "never" if served is None else f"after {served:.2f} s"
            self.violations.append(f"after {after}: every shard served again {what}")
            self.progress(f"VIOLATION: after {after}, shards {left} served again {what}")
        else:
            self.progress(f"after {after}: every shard served again {served:.2f} s later")

    def check(self) -> None:
        """ScenarioError naming every recovery that missed its bound."""
        if self.violations:
            raise ScenarioError(
                f"{len(self.violations)} of {len(self.recoveries)} recoveries missed the "
                f"{self.bound_s:g} s bound: " + "; ".join(self.violations)
            )


async def _listening(port: int, wait_s: float) -> None:
    with anyio.fail_after(wait_s):
        while True:
            try:
                stream = await anyio.connect_tcp(HOST, port)
            except OSError:
                await anyio.sleep(POLL_S)
                continue
            await stream.aclose()
            return
