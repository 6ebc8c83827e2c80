"""The chaos harness: a coordinator, a fault proxy and N member processes, driven by a scenario.

``run(settings, scenario)`` starts ``huddle serve`` (unless ``settings.bootstrap`` names a
running coordinator), a ``FaultProxy`` in front of it when the scenario injects network
faults (or ``settings.proxy`` asks for one), creates the topic, waits for the group to
settle (the ``steady`` event), starts the members (``python -m chaos.worker``) and
applies the scenario's steps at their times, printing a progress line every second. Every
run is bounded (``duration`` plus a fixed allowance) and, however it ends — finished,
interrupted by SIGINT/SIGTERM, failed — every process it started is stopped by PID:
SIGTERM, then SIGKILL after a grace.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Final

import anyio
import structlog

from huddle.chaos import clients
from huddle.chaos import events as ev
from huddle.chaos.cluster import SHARDS, ChaosCluster
from huddle.chaos.events import EventLog, events_dir
from huddle.chaos.procs import HOST, NotListeningError, signal_pid, spawn, stop_all
from huddle.chaos.progress import EventTail
from huddle.chaos.proxy import FaultProxy, fault_proxy
from huddle.chaos.runsettings import RunResult, RunSettings
from huddle.chaos.scenarios import CLUSTER_ACTIONS, Scenario, ScenarioError, Step
from huddle.chaos.worker import WorkerSettings
from huddle.client.admin import Admin
from huddle.client.security import NO_SECURITY, security_from_env
from huddle.protocol.addresses import free_port
from huddle.protocol.errors import TopicAlreadyExistsError

__all__ = ["Harness", "RunResult", "RunSettings", "run"]

log = structlog.get_logger("huddle.chaos.harness")
SETUP_ALLOWANCE_S: Final = 45.0  # on top of the duration: starting, settling, stopping
STOP_GRACE_S: Final = 5.0
POLL_S: Final = 0.05
STEADY_WAIT_S: Final = 15.0  # at most this long for the group to settle after start-up
STEADY_QUIET_S: Final = 1.0  # settled: no member joined a generation for this long


def _huddle_argv() -> list[str]:
    script = Path(sys.executable).with_name("huddle")
    return [str(script)] if script.exists() else [sys.executable, "-m", "huddle"]


class Harness:
    def __init__(
        self,
        settings: RunSettings,
        scenario: Scenario,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.s = settings
        self.scenario = scenario
        self.progress = progress or (lambda line: None)
        self.run_dir = settings.run_dir
        self.rng = random.Random(settings.seed)
        self.members: dict[str, subprocess.Popen[bytes]] = {}
        self.frozen: set[str] = set()
        self.coordinator: subprocess.Popen[bytes] | None = None
        self.started: list[subprocess.Popen[bytes]] = []
        self.coordinator_port = 0
        self.proxy: FaultProxy | None = None
        self.next_index = 1
        self.faults = 0
        self.outcome = "failed"
        self.events: EventLog | None = None
        self.tail = EventTail(events_dir(settings.run_dir))
        self.use_proxy = scenario.network_faults if settings.proxy is None else settings.proxy
        if scenario.network_faults and not self.use_proxy:
            raise ScenarioError(
                f"scenario {scenario.name!r} injects network faults: it needs the proxy"
            )
        if scenario.cluster and (settings.bootstrap is not None or self.use_proxy):
            raise ScenarioError(
                f"scenario {scenario.name!r} runs its own coordinator cluster: no --bootstrap "
                "and no fault proxy"
            )
        self.cluster: ChaosCluster | None = None
        if scenario.coordinator_faults and settings.bootstrap is not None:
            raise ScenarioError(
                f"scenario {scenario.name!r} kills and starts the coordinator: "
                "it needs the harness's own coordinator, not --bootstrap"
            )
        self.kafka = clients.is_kafka(settings.client)  # real Kafka clients as members
        clients.check(settings, scenario)
        self.kafka_port = 0  # the coordinator's Kafka listener (a Kafka-client run)
        self.producer: subprocess.Popen[bytes] | None = None  # feeds a Kafka-client run
        self.bootstrap = ""  # where members connect: the proxy or the coordinator

    # --- entry point -----------------------------------------------------------------

    def run(self) -> RunResult:
        """Run the scenario to its end; every child is stopped whatever happens."""
        try:
            anyio.run(self._main, backend_options={"use_uvloop": True})
        except KeyboardInterrupt:
            self.outcome = "interrupted"
        finally:
            stop_all(self.started, STOP_GRACE_S)
            if self.events is not None:
                self.events.close()
        return RunResult(self.run_dir, self.outcome, [p.pid for p in self.started], self.faults)

    async def _main(self) -> None:
        self.events = EventLog(events_dir(self.run_dir) / "chaos.jsonl", "chaos")
        settings = {k: v for k, v in asdict(self.s).items() if k != "run_dir"}
        settings["run_dir"] = str(self.run_dir)
        settings["proxy"] = self.use_proxy
        self.events.write(
            ev.RunStarted(
                scenario=self.scenario.name,
                protocol=self.s.protocol,
                client=self.s.client,
                members=self.s.members,
                partitions=self.s.partitions,
                settings=settings,
            )
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_signals, tg.cancel_scope)
                with anyio.fail_after(self.s.duration + SETUP_ALLOWANCE_S):
                    await self._run_scenario()
                    self.outcome = "completed"
                tg.cancel_scope.cancel()
        except TimeoutError:
            self.outcome = "deadline"
        except Exception as exc:
            log.exception("run_failed")
            self.progress(f"run failed: {type(exc).__name__}: {exc}")
            self.outcome = "failed"
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop_members()
            self.events.write(ev.RunFinished(outcome=self.outcome))

    async def _watch_signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.progress(f"{signal.Signals(signum).name}: stopping every process")
                self.outcome = "interrupted"
                scope.cancel()
                return

    async def _run_scenario(self) -> None:
        if self.scenario.cluster:
            await self._run_on_cluster()
            return
        if self.s.bootstrap is None:
            self.coordinator_port = free_port()
            self.kafka_port = free_port() if self.kafka else 0
            if not (self.kafka and self.use_proxy):  # else: it advertises the proxy, below
                await self._start_coordinator()
            upstream = (HOST, self.kafka_port or self.coordinator_port)
        else:  # a running coordinator: its Kafka listener for Kafka clients
            host, _, port = (self.s.kafka_bootstrap or self.s.bootstrap).rpartition(":")
            upstream = (host, int(port))
        async with contextlib.AsyncExitStack() as stack:
            self.bootstrap = f"{upstream[0]}:{upstream[1]}"
            if self.use_proxy:
                self.proxy = await stack.enter_async_context(fault_proxy(*upstream))
                self.bootstrap = f"{HOST}:{self.proxy.port}"
            if self.coordinator is None and self.s.bootstrap is None:
                await self._start_coordinator()
            admin = f"{upstream[0]}:{upstream[1]}"  # huddle's own listener
            if self.kafka:
                admin = self.s.bootstrap or f"{HOST}:{self.coordinator_port}"
            await self._create_topic(admin)
            if self.kafka:
                self._start_producer()
            for _ in range(self.s.members):
                await self._start_member(self._new_name(), fault=False)
            via = "the fault proxy" if self.use_proxy else "the coordinator directly"
            via += " (its Kafka listener)" if self.kafka else ""
            self.progress(
                f"started {self.s.members} {self.s.client} members, scenario "
                f"{self.scenario.name}, protocol {self.s.protocol}, connected to {via}, "
                f"run dir {self.run_dir}"
            )
            await self._wait_steady()
            await self._apply_steps(time.monotonic())
            await self._stop_members()
        await self._stop_many([p for p in (self.producer, self.coordinator) if p is not None])

    async def _run_on_cluster(self) -> None:
        shards = int(self.scenario.extra.get("shards", SHARDS))
        cluster = ChaosCluster(
            self.run_dir, events_dir(self.run_dir), _huddle_argv(), self.started,
            shards=shards, events=self.events, progress=self.progress, kafka=self.kafka,
            serve_flags=clients.node_flags(self.s),
        )  # fmt: skip
        self.cluster = cluster
        async with cluster.running(self.s.group, self.s.disconnect_grace_ms):
            self.bootstrap = cluster.bootstrap
            await self._create_topic(self.bootstrap)
            if self.kafka:  # every node's Kafka listener
                self.bootstrap = cluster.kafka_bootstrap
                self._start_producer()
            for _ in range(self.s.members):
                await self._start_member(self._new_name(), fault=False)
            self.progress(
                f"started etcd, {len(cluster.nodes)} coordinator nodes and {self.s.members} "
                f"members, scenario {self.scenario.name}, protocol {self.s.protocol}, "
                f"run dir {self.run_dir}"
            )
            await self._wait_steady()
            await self._apply_steps(time.monotonic())
            await self._stop_members()
        cluster.check()  # every shard served again in time after each heal

    async def _apply_steps(self, t0: float) -> None:
        steps = self.scenario.ordered()
        next_progress = t0
        end = t0 + self.s.duration
        while True:
            now = time.monotonic()
            while steps and t0 + steps[0].at <= now:
                await self._apply(steps.pop(0))
            if now >= next_progress:
                await self._report(now - t0)
                next_progress += 1.0
            if now >= end:
                assert self.events is not None
                self.events.write(ev.ScenarioFinished())  # the members are stopped next
                return
            wake = min([end, next_progress] + ([t0 + steps[0].at] if steps else []))
            await anyio.sleep(max(wake - time.monotonic(), 0))  # pacing the scenario

    async def _wait_steady(self) -> None:
        """Start-up is not what a scenario measures: wait (at most ``STEADY_WAIT_S``) until
        the group settled, and mark the moment with a ``steady`` event."""
        assert self.events is not None
        names = set(self.members)
        deadline = time.monotonic() + STEADY_WAIT_S
        settled = False
        while time.monotonic() < deadline:
            await anyio.to_thread.run_sync(self.tail.poll)
            if self.tail.settled(names, self.s.partitions, time.time(), STEADY_QUIET_S):
                settled = True
                break
            await anyio.sleep(POLL_S)  # polling the members' event files
        gen = self.tail.generation
        self.events.write(ev.Steady(generation=gen, members=len(names), settled=settled))
        if settled:
            word = clients.generation_word(self.s.protocol)
            self.progress(f"group settled at {word} {gen}; the scenario starts")
        else:
            self.progress(f"the group did not settle in {STEADY_WAIT_S:g} s; starting anyway")

    async def _report(self, elapsed: float) -> None:
        # in a thread: reading a second of events must not hold up the proxy's forwarding
        await anyio.to_thread.run_sync(self.tail.poll)
        live = sum(1 for p in self.members.values() if p.poll() is None)
        gen = "-" if self.tail.generation is None else str(self.tail.generation)
        frozen = f" ({len(self.frozen)} frozen)" if self.frozen else ""
        word = clients.generation_word(self.s.protocol)
        self.progress(
            f"[{elapsed:5.1f}s/{self.s.duration:g}s] members {live}/{len(self.members)} live"
            f"{frozen}  {word} {gen}  records {self.tail.processed}  faults {self.faults}"
        )

    # --- steps -----------------------------------------------------------------------

    async def _apply(self, step: Step) -> None:
        a = step.action
        log.info("step", at=step.at, action=a, target=step.target, value=step.value)
        if a == "start":
            assert step.target is not None
            await self._start_member(step.target, fault=True)
        elif a in ("kill", "sigterm", "sigstop", "sigcont"):
            self._signal_member(a, step.target)
        elif a == "scale_up":
            for _ in range(int(step.value or 1)):
                await self._start_member(self._new_name(), fault=True)
        elif a == "scale_down":
            live = [n for n, p in self.members.items() if p.poll() is None]
            for name in list(reversed(live))[: int(step.value or 1)]:
                self._signal_member("sigterm", name)
        elif a == "coordinator_kill":
            if self.coordinator is not None and signal_pid(self.coordinator, signal.SIGKILL):
                self._fault(a, "coordinator", f"pid {self.coordinator.pid}")
        elif a == "coordinator_start":
            await self._start_coordinator()
            self._fault(a, "coordinator", f"port {self.coordinator_port}")
        elif a in CLUSTER_ACTIONS:
            assert self.cluster is not None
            detail = await self.cluster.fault(a, self.s.group)
            if detail is not None:
                self._fault(a, "coordinator", detail)
                await self.cluster.settle(a)  # after a heal: every shard served again
            else:
                self.progress(f"{a}: no node to act on")
        else:
            await self._network(step)

    def _signal_member(self, action: str, target: str | None) -> None:
        if target is None:
            live = sorted(n for n, p in self.members.items() if p.poll() is None)
            if not live:
                return
            target = self.rng.choice(live)
        proc = self.members.get(target)
        if proc is None:
            self.progress(f"{action}: no member {target}")
            return
        signum = {
            "kill": signal.SIGKILL,
            "sigterm": signal.SIGTERM,
            "sigstop": signal.SIGSTOP,
            "sigcont": signal.SIGCONT,
        }[action]
        if action == "sigterm" and target in self.frozen:
            signal_pid(proc, signal.SIGCONT)  # a frozen process would not act on SIGTERM
            self.frozen.discard(target)
        if signal_pid(proc, signum):
            if action == "sigstop":
                self.frozen.add(target)
            elif action in ("sigcont", "kill"):
                self.frozen.discard(target)
            self._fault(action, target, f"pid {proc.pid}")

    async def _network(self, step: Step) -> None:
        proxy = self.proxy
        assert proxy is not None
        match step.action:
            case "net_latency":
                proxy.set_latency(step.value or 0)
                detail = f"latency {step.value or 0:g} ms"
            case "net_stall":
                proxy.stall()
                detail = "stalled"
            case "net_drop":
                detail = f"dropped {await proxy.drop()} connections"
            case "net_partition":
                detail = f"partitioned, dropped {await proxy.partition()} connections"
            case _:
                proxy.heal()
                detail = "healed"
        self._fault(step.action, "proxy", detail)

    def _fault(self, action: str, target: str, detail: str) -> None:
        assert self.events is not None
        assert action in ev.FAULT_ACTIONS
        self.faults += 1
        self.events.write(ev.Fault(action=action, target=target, detail=detail))
        self.progress(f"fault: {action} {target} ({detail})")

    # --- processes -------------------------------------------------------------------

    def _new_name(self) -> str:
        name = f"member-{self.next_index}"
        self.next_index += 1
        return name

    def _member_argv(self, name: str) -> list[str]:
        s = self.s
        settings = WorkerSettings(
            bootstrap=self.bootstrap,
            name=name,
            run_dir=str(self.run_dir),
            group=s.group,
            topic=s.topic,
            protocol=s.protocol,
            options=s.options,
            instance_id=name if self.scenario.static else None,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            rebalance_timeout_ms=s.rebalance_timeout_ms,
            rate=s.rate,
            commit_interval_ms=s.commit_interval_ms,
            stateful=s.stateful,
            restore_rate=s.restore_rate,
            state_records=s.state_records,
            max_seconds=s.duration + SETUP_ALLOWANCE_S,
            secure_from_env=s.bootstrap is not None,
            client=s.client,
        )
        return clients.member_argv(s, settings)

    async def _start_member(self, name: str, *, fault: bool) -> None:
        old = self.members.get(name)
        if old is not None and old.poll() is None:
            await self._stop(old)  # one process per name: its event file is its own
        self.frozen.discard(name)
        proc = spawn(self._member_argv(name), stdout=self.run_dir / "logs" / f"{name}.log")
        self.members[name] = proc
        self.started.append(proc)
        if fault:
            self._fault("start", name, f"pid {proc.pid}")

    async def _start_coordinator(self) -> None:
        argv = [
            *_huddle_argv(),
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.coordinator_port),
            "--log-format",
            "json",
            "--initial-rebalance-delay-ms",
            "0",
            "--min-session-timeout-ms",
            "500",
            "--disconnect-grace-ms",
            str(self.s.disconnect_grace_ms),
            # topics and committed offsets survive a coordinator kill and restart
            "--data-dir",
            str(self.run_dir / "coordinator-data"),
            *(clients.listener_flags(self.kafka_port, self.s, self.proxy) if self.kafka else []),
            *(clients.consumer_flags(self.s) if clients.huddle_consumer(self.s) else []),
        ]
        proc = spawn(
            argv,
            stdout=self.run_dir / "logs" / "coordinator.log",
            stderr=events_dir(self.run_dir) / "coordinator.jsonl",
        )
        self.coordinator = proc
        self.started.append(proc)
        await self._wait_listening(proc, self.coordinator_port, 20.0)
        if self.kafka:
            await self._wait_listening(proc, self.kafka_port, 20.0)

    def _start_producer(self) -> None:
        """The records of a Kafka-client run: ``rate`` per second into every partition."""
        argv = clients.producer_argv(self.s, self.bootstrap, self.s.duration + SETUP_ALLOWANCE_S)
        self.producer = spawn(argv, stdout=self.run_dir / "logs" / "producer.log")
        self.started.append(self.producer)

    async def _wait_listening(
        self, proc: subprocess.Popen[bytes], port: int, wait_s: float
    ) -> None:
        with anyio.fail_after(wait_s):
            while True:
                if proc.poll() is not None:
                    raise NotListeningError(f"coordinator exited with code {proc.returncode}")
                try:
                    stream = await anyio.connect_tcp(HOST, port)
                except OSError:
                    await anyio.sleep(POLL_S)
                    continue
                await stream.aclose()
                return

    async def _create_topic(self, bootstrap: str) -> None:
        # A coordinator given with --bootstrap may be secured: the harness and its workers
        # take TLS and SASL settings from the environment (HUDDLE_CLIENT_TLS_CA, ...).
        security = security_from_env(os.environ) if self.s.bootstrap else NO_SECURITY
        async with Admin(bootstrap, client_id="huddle-chaos", security=security) as admin:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topic(self.s.topic, self.s.partitions)

    async def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM (after SIGCONT), then SIGKILL after the grace; waits without blocking."""
        await self._stop_many([proc])

    async def _stop_members(self) -> None:
        await self._stop_many(list(self.members.values()))
        self.frozen.clear()

    async def _stop_many(self, procs: list[subprocess.Popen[bytes]]) -> None:
        live = [p for p in procs if p.poll() is None]
        for p in live:
            signal_pid(p, signal.SIGCONT)
            signal_pid(p, signal.SIGTERM)
        await _wait_exited(live, STOP_GRACE_S)
        for p in live:
            if p.poll() is None:
                signal_pid(p, signal.SIGKILL)
        await _wait_exited(live, STOP_GRACE_S)


async def _wait_exited(procs: list[subprocess.Popen[bytes]], wait_s: float) -> None:
    """Until every process has exited (reaped), or ``wait_s`` passed: polls, a child's exit
    has no event to wait on here."""
    with anyio.move_on_after(wait_s):
        while any(p.poll() is None for p in procs):  # noqa: ASYNC110
            await anyio.sleep(POLL_S)


def run(
    settings: RunSettings, scenario: Scenario, progress: Callable[[str], None] | None = None
) -> RunResult:
    return Harness(settings, scenario, progress).run()
