"""Whole chaos runs: the harness starts, faults, records and cleans up real processes."""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from huddle.chaos import events as ev
from huddle.chaos.eventfiles import problems, read_events
from huddle.chaos.harness import RunSettings, run
from huddle.chaos.procs import pid_alive
from huddle.chaos.scenarios import ScenarioError, Shape, built_in
from tests.etcd import require_etcd

pytestmark = pytest.mark.e2e  # real member and coordinator processes

DEADLINE_S = 20.0


def read_until(pipe: IO[bytes], text: str, wait_s: float = DEADLINE_S) -> str:
    """Read a process's output until it says ``text``; AssertionError at the deadline or
    if the output ends first."""
    fd, wanted, seen = pipe.fileno(), text.encode(), b""
    deadline = time.monotonic() + wait_s
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while wanted not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise AssertionError(f"no {text!r} within {wait_s} s; got {seen[-500:]!r}")
            chunk = os.read(fd, 65_536)
            if not chunk:
                raise AssertionError(f"the output ended without {text!r}: {seen[-500:]!r}")
            seen += chunk
    return seen.decode()


def wait_gone(pids: set[int], wait_s: float) -> None:
    """Wait for every one of ``pids`` to exit (pidfds: woken by the exits themselves)."""
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue  # gone already
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left = set(fds)
        deadline = time.monotonic() + wait_s
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{len(left)} processes still running after {wait_s} s")
            for fd, _ in poller.poll(remaining * 1000):
                left.discard(fd)
                poller.unregister(fd)
    finally:
        for fd in fds:
            os.close(fd)


def test_process_death_run_records_every_process_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    settings = RunSettings(
        run_dir=tmp_path, members=3, partitions=6, duration=5.0, protocol="cooperative-sticky"
    )
    lines: list[str] = []
    result = run(settings, built_in("process-death", Shape(5.0, 3)), lines.append)

    assert result.outcome == "completed"
    assert not [pid for pid in result.pids if pid_alive(pid)], "every child is gone"
    events = tmp_path / "events"
    names = {p.name for p in events.iterdir()}
    assert names == {
        f"{n}.jsonl" for n in ("chaos", "coordinator", "member-1", "member-2", "member-3")
    }
    coordinator = read_events(events / "coordinator.jsonl")
    assert any(r["event"] == "generation_started" for r in coordinator)

    chaos = read_events(events / "chaos.jsonl")
    assert problems(chaos, "chaos") == []
    assert chaos[0]["event"] == ev.RUN_STARTED
    assert chaos[0]["settings"]["proxy"] is False, "no network faults: no proxy in the way"
    assert any("connected to the coordinator directly" in line for line in lines)
    assert chaos[-1]["event"] == ev.RUN_FINISHED
    faults = [r for r in chaos if r["event"] == ev.FAULT]
    assert [(f["action"], f["target"]) for f in faults] == [
        ("kill", "member-2"),
        ("start", "member-2"),
    ]
    assert result.faults == 2
    kill_ts, start_ts = faults[0]["ts"], faults[1]["ts"]
    steady = [r for r in chaos if r["event"] == ev.STEADY]
    assert [(s["settled"], s["members"]) for s in steady] == [(True, 3)]
    assert steady[0]["ts"] < kill_ts, "the scenario's clock starts once the group settled"
    assert any("group settled at generation" in line for line in lines)
    finished = [r["ts"] for r in chaos if r["event"] == ev.SCENARIO_FINISHED]
    assert len(finished) == 1
    assert finished[0] >= steady[0]["ts"] + settings.duration

    victim = read_events(events / "member-2.jsonl")
    assert problems(victim, "member-2") == []
    restart = [i for i, r in enumerate(victim) if r["event"] == ev.PROCESS_STARTED][1]
    assert all(r["ts"] <= kill_ts for r in victim[:restart]), "nothing after the SIGKILL"
    assert victim[restart - 1]["event"] != ev.PROCESS_STOPPED
    assert victim[restart]["ts"] >= start_ts
    for name in ("member-1", "member-3"):
        records = read_events(events / f"{name}.jsonl")
        assert problems(records, name) == []
        assert records[-1]["event"] == ev.PROCESS_STOPPED
        assert records[-1]["ts"] > finished[0], "the scenario is over before members stop"
        assert any(r["event"] == ev.PROCESSED for r in records)
    assert any("fault: kill member-2" in line for line in lines)
    assert any("members 2/3 live" in line for line in lines), "progress shows the death"


def _children(pid: int) -> set[int]:
    """Every descendant PID of ``pid`` (Linux /proc)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def test_interrupted_run_stops_every_process_it_started(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "huddle", "chaos", "run", "process-death"]
    argv += ["--duration", "60", "--members", "3", "--run-dir", str(tmp_path)]
    harness = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children: set[int] = set()
    try:
        assert harness.stdout is not None
        # settled: every member joined and owns partitions, every partition was processed
        read_until(harness.stdout, "group settled at generation")
        children = _children(harness.pid)
        assert len(children) >= 4, "a coordinator and three members"
        harness.send_signal(signal.SIGINT)
        assert harness.wait(timeout=20) == 130
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(5)
        assert harness.stdout is not None
        harness.stdout.close()
    wait_gone(children, wait_s=5)
    chaos = read_events(tmp_path / "events" / "chaos.jsonl")
    assert chaos[-1]["event"] == ev.RUN_FINISHED
    assert chaos[-1]["outcome"] == "interrupted"


def test_coordinator_faults_need_the_harness_coordinator(tmp_path: Path) -> None:
    scenario = built_in("coordinator-restart", Shape(10.0, 3))
    assert scenario.coordinator_faults
    settings = RunSettings(run_dir=tmp_path, bootstrap="127.0.0.1:9")
    with pytest.raises(ScenarioError, match="not --bootstrap"):
        run(settings, scenario)
    assert not (tmp_path / "events").exists(), "refused before anything started"


def test_network_faults_need_the_proxy(tmp_path: Path) -> None:
    scenario = built_in("network-faults", Shape(10.0, 3))
    assert scenario.network_faults
    assert not built_in("rolling-bounce", Shape(10.0, 3)).network_faults
    settings = RunSettings(run_dir=tmp_path, proxy=False)
    with pytest.raises(ScenarioError, match="needs the proxy"):
        run(settings, scenario)
    assert not (tmp_path / "events").exists(), "refused before anything started"


@pytest.mark.parametrize("protocol", ["cooperative-sticky", "consumer"])
def test_coordinator_failover_moves_the_group_without_a_rebalance(
    tmp_path: Path, protocol: str
) -> None:
    """etcd and three coordinator nodes: the node owning the group is killed, then the new
    owner frozen past its lease and thawed. The members go on in their generation (a
    consumer-protocol member: at its epoch, reconnecting to the new owner): no member
    loses or gives up a partition after the group settled."""
    require_etcd()
    settings = RunSettings(
        run_dir=tmp_path,
        members=3,
        partitions=6,
        duration=16.0,
        protocol=protocol,
        session_timeout_ms=10_000,
    )
    lines: list[str] = []
    result = run(settings, built_in("coordinator-failover", Shape(16.0, 3)), lines.append)

    assert result.outcome == "completed", lines
    assert not [pid for pid in result.pids if pid_alive(pid)], "every child is gone"
    events = tmp_path / "events"
    chaos = read_events(events / "chaos.jsonl")
    faults = [(r["action"], r["target"]) for r in chaos if r["event"] == ev.FAULT]
    assert faults == [
        ("owner_kill", "coordinator"),
        ("owner_stop", "coordinator"),
        ("owner_cont", "coordinator"),
    ]
    steady = next(r["ts"] for r in chaos if r["event"] == ev.STEADY)
    nodes = sorted(p.name for p in events.glob("coordinator-node-*.jsonl"))
    assert len(nodes) == 3
    loaded_event = "consumer_group_loaded" if protocol == "consumer" else "group_loaded"
    loaded = [r for n in nodes for r in read_events(events / n) if r["event"] == loaded_event]
    assert loaded, "another node loaded the group"
    for name in ("member-1", "member-2", "member-3"):
        records = read_events(events / f"{name}.jsonl")
        # the scenario's span: the members give their partitions up when stopped after it
        after = [r for r in records if steady < r["ts"] < steady + settings.duration]
        assert not [r for r in after if r["event"] in (ev.tag_of(ev.Lost), ev.tag_of(ev.Revoked))]
        assert any(r["event"] == ev.PROCESSED for r in after)


def test_a_chaos_run_against_a_secured_coordinator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS, SCRAM and the authorizer on: the harness and its member processes take their
    settings from the environment, and the run goes as it does unsecured."""
    import json

    import anyio

    from huddle.coordinator.security.acls import Operation, ResourceType
    from tests.security_setup import acl, keep, make_pki

    pki = make_pki(tmp_path)
    data = tmp_path / "data"
    rules = [
        acl("User:chaos", Operation.READ, ResourceType.GROUP, "chaos"),
        acl("User:chaos", Operation.ALL, ResourceType.TOPIC, "chaos"),
    ]
    anyio.run(keep, data, {"chaos": "chaos-pw"}, rules)
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "huddle", "serve", "--port", "0", "--log-format", "json"),
            *("--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "100"),
            *("--data-dir", str(data)),
            *("--tls-cert", pki.server, "--tls-key", pki.server),
            *("--sasl", "SCRAM-SHA-512", "--authorizer"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stderr is not None
        seen = read_until(server.stderr, '"server_listening"')
        line = next(x for x in seen.splitlines() if '"server_listening"' in x)
        port = json.loads(line)["port"]
        monkeypatch.setenv("HUDDLE_CLIENT_TLS_CA", pki.ca)
        monkeypatch.setenv("HUDDLE_USERNAME", "chaos")
        monkeypatch.setenv("HUDDLE_PASSWORD", "chaos-pw")
        settings = RunSettings(
            run_dir=tmp_path / "run",
            members=2,
            partitions=4,
            duration=3.0,
            bootstrap=f"127.0.0.1:{port}",
        )
        result = run(settings, built_in("process-death", Shape(3.0, 2)))
    finally:
        server.terminate()
        _, rest = server.communicate(timeout=DEADLINE_S)
    events = [json.loads(x) for x in (seen + rest.decode()).splitlines() if x.startswith("{")]
    assert result.outcome == "completed"
    authenticated = [e for e in events if e["event"] == "authenticated"]
    assert {e["principal"] for e in authenticated} == {"User:chaos"}
    assert not [e for e in events if e["event"] == "authentication_failed"]
    for name in ("member-1", "member-2"):
        records = read_events(tmp_path / "run" / "events" / f"{name}.jsonl")
        assert problems(records, name) == []
        assert any(r["event"] == ev.PROCESSED for r in records)
