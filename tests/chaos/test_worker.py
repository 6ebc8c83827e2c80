"""A chaos worker process against a real coordinator: it processes, commits, resumes."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from huddle.chaos import events as ev
from huddle.chaos.eventfiles import problems, read_events
from huddle.chaos.worker import WorkerSettings, main
from huddle.client.admin import Admin
from huddle.coordinator.server import CoordinatorServer
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e  # real worker processes

WAIT_S = 15.0


def start_worker(bootstrap: str, run_dir: Path, **extra: object) -> subprocess.Popen[bytes]:
    settings = WorkerSettings(
        bootstrap=bootstrap,
        name="member-1",
        run_dir=str(run_dir),
        rate=200,
        commit_interval_ms=200,
        session_timeout_ms=2000,
        max_seconds=60,
        **extra,  # type: ignore[arg-type]
    )
    argv = [sys.executable, "-m", "huddle.chaos.worker", settings.to_json()]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def stop_worker(proc: subprocess.Popen[bytes]) -> int:
    try:
        proc.send_signal(signal.SIGTERM)
        await wait_until(lambda: proc.poll() is not None, wait_s=WAIT_S, what="worker exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    return int(proc.returncode)


def of(records: list[dict[str, object]], event: str) -> list[dict[str, object]]:
    return [r for r in records if r["event"] == event]


async def test_worker_processes_commits_and_resumes_without_gap(
    server: CoordinatorServer, tmp_path: Path
) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic("chaos", 2)
    path = tmp_path / "events" / "member-1.jsonl"

    def accepted_commits() -> list[dict[str, object]]:
        return [r for r in of(read_events(path), ev.COMMITTED) if r["accepted"]]

    first = start_worker(bootstrap, tmp_path)
    try:
        await wait_until(
            lambda: any(int(str(c["offset"])) > 20 for c in accepted_commits()),
            wait_s=WAIT_S,
            what="a commit past offset 20",
        )
    finally:
        assert await stop_worker(first) == 0
    run1 = read_events(path)
    assert run1[0]["event"] == ev.PROCESS_STARTED
    assert run1[-1]["event"] == ev.PROCESS_STOPPED
    assert run1[-1]["reason"] == "sigterm"
    assert of(run1, ev.REVOKED), "a clean shutdown revokes (and commits) what it owned"
    last_commit = {(c["topic"], c["partition"]): c["offset"] for c in accepted_commits()}
    assert set(last_commit) == {("chaos", 0), ("chaos", 1)}
    for p in (0, 1):  # records processed in order from 0, no gap, up to the final commit
        batches = [r for r in of(run1, ev.PROCESSED) if r["partition"] == p]
        offsets = [(int(str(b["offset"])), int(str(b["count"]))) for b in batches]
        assert offsets[0][0] == 0
        for (o1, c1), (o2, _) in itertools.pairwise(offsets):
            assert o2 == o1 + c1
        assert offsets[-1][0] + offsets[-1][1] == last_commit[("chaos", p)]

    second = start_worker(bootstrap, tmp_path)
    try:
        await wait_until(
            lambda: (
                len(of(read_events(path), ev.PROCESS_STARTED)) == 2
                and {r["partition"] for r in of(read_events(path)[len(run1) :], ev.PROCESSED)}
                == {0, 1}
            ),
            wait_s=WAIT_S,
            what="the restarted worker processing both partitions",
        )
    finally:
        assert await stop_worker(second) == 0
    run2 = read_events(path)[len(run1) :]
    for p in (0, 1):
        first_batch = next(r for r in of(run2, ev.PROCESSED) if r["partition"] == p)
        assert first_batch["offset"] == last_commit[("chaos", p)], "resumes at the commit"
    assert problems(read_events(path), "member-1") == []
    joined = of(run2, ev.JOINED)
    assert joined
    assert joined[0]["leader"] is True


async def test_stateful_worker_restores_before_processing(
    server: CoordinatorServer, tmp_path: Path
) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic("chaos", 1)
    path = tmp_path / "events" / "member-1.jsonl"
    proc = start_worker(bootstrap, tmp_path, stateful=True, restore_rate=100.0)
    try:
        await wait_until(
            lambda: bool(of(read_events(path), ev.PROCESSED)), wait_s=WAIT_S, what="processing"
        )
    finally:
        await stop_worker(proc)
    records = read_events(path)
    kinds = [r["event"] for r in records if r["event"] in (ev.RESTORED, ev.PROCESSED)]
    assert kinds[0] == ev.RESTORED
    assert (tmp_path / "state" / "member-1.json").exists()


async def committed_then_state_lost(
    server: CoordinatorServer, run_dir: Path, past: int
) -> tuple[str, Path, list[dict[str, object]], int]:
    """A stateful worker on one partition commits past offset ``past`` and stops; then its
    local state is deleted. The bootstrap, its event file, the events so far and the last
    accepted commit."""
    bootstrap = f"127.0.0.1:{server.port}"
    async with Admin(bootstrap) as admin:
        await admin.create_topic("chaos", 1)
    path = run_dir / "events" / "member-1.jsonl"

    def accepted() -> list[dict[str, object]]:
        return [r for r in of(read_events(path), ev.COMMITTED) if r["accepted"]]

    first = start_worker(bootstrap, run_dir, stateful=True, restore_rate=1_000.0)
    try:
        await wait_until(
            lambda: any(int(str(c["offset"])) > past for c in accepted()),
            wait_s=WAIT_S,
            what=f"a commit past offset {past}",
        )
    finally:
        assert await stop_worker(first) == 0
    committed = int(str(accepted()[-1]["offset"]))
    (run_dir / "state" / "member-1.json").unlink()  # the local state is gone
    return bootstrap, path, read_events(path), committed


async def test_a_stateful_worker_without_its_state_restores_up_to_the_commit(
    server: CoordinatorServer, tmp_path: Path
) -> None:
    """A member that lost its local state (a new machine) rebuilds it from 0 up to the
    committed offset before it processes: the log says from where, up to where, and how
    many records (the pipeline's restore figures and its restore safety check read them)."""
    bootstrap, path, run1, committed = await committed_then_state_lost(server, tmp_path, 20)
    (fresh,) = of(run1, ev.RESTORE_STARTED)
    assert (fresh["offset"], fresh["from_offset"], fresh["records"]) == (0, 0, 0)
    second = start_worker(bootstrap, tmp_path, stateful=True, restore_rate=1_000.0)
    try:
        await wait_until(
            lambda: bool(of(read_events(path)[len(run1) :], ev.PROCESSED)),
            wait_s=WAIT_S,
            what="the restarted worker processing",
        )
    finally:
        assert await stop_worker(second) == 0
    run2 = read_events(path)[len(run1) :]
    kinds = [r["event"] for r in run2 if r["event"] not in (ev.JOINED, ev.COMMITTED)]
    assert kinds[1:5] == [ev.ASSIGNED, ev.RESTORE_STARTED, ev.RESTORED, ev.PROCESSED]
    (started,) = of(run2, ev.RESTORE_STARTED)
    assert (started["offset"], started["from_offset"], started["records"]) == (
        committed,
        0,
        committed,
    )
    (restored,) = of(run2, ev.RESTORED)
    assert (restored["offset"], restored["records"]) == (committed, committed)
    assert of(run2, ev.PROCESSED)[0]["offset"] == committed


async def test_a_worker_stopped_mid_restore_says_how_many_records_it_replayed(
    server: CoordinatorServer, tmp_path: Path
) -> None:
    """A task revoked before its restore finished (here: the member shuts down) writes
    ``restore_stopped`` with the records replayed by then, fewer than the restore's, and
    no ``restored``: the pipeline counts those, not the ones the restore planned."""
    bootstrap, path, run1, committed = await committed_then_state_lost(server, tmp_path, 100)
    second = start_worker(bootstrap, tmp_path, stateful=True, restore_rate=10.0)  # slow
    try:
        await wait_until(
            lambda: bool(of(read_events(path)[len(run1) :], ev.RESTORE_STARTED)),
            wait_s=WAIT_S,
            what="the restore started",
        )
    finally:
        assert await stop_worker(second) == 0
    run2 = read_events(path)[len(run1) :]
    (started,) = of(run2, ev.RESTORE_STARTED)
    assert (started["records"], started["seconds"]) == (committed, committed / 10.0)
    assert of(run2, ev.RESTORED) == []
    (cut,) = of(run2, ev.RESTORE_STOPPED)
    assert cut["offset"] == committed
    assert 0 <= int(str(cut["records"])) < committed
    kinds = [r["event"] for r in run2]
    assert kinds.index(ev.REVOKED) < kinds.index(ev.RESTORE_STOPPED)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (['{"bootstrap": "127.0.0.1:1", "name": "m"}'], "Object missing required field `run_dir`"),
        (['{"bootstrap": "h:1", "name": "m", "run_dir": ".", "rate": "fast"}'], "`$.rate`"),
        (['{"bootstrap": "h:1", "name": "m", "run_dir": ".", "colour": 1}'], "unknown field"),
        (['{"bootstrap": "h:1", "name": "m", "run_dir": ".", "rate": 0}'], "must be positive"),
        (
            ['{"bootstrap": "h:1", "name": "m", "run_dir": ".", "state_records": 0}'],
            "state_records must be positive",
        ),
        (["{not json"], "not JSON"),
        (["--rate", "5"], "usage"),
    ],
)
def test_bad_settings_are_refused_in_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err
    if "usage" not in said:
        assert err.count("\n") == 1
