"""A running coordinator whose users and ACLs store goes bad (malformed, deleted, or not
readable for a while) keeps serving with what it read last, logs an error and shows it in
its metrics; it takes the store again once it is good."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from structlog.typing import EventDict

from huddle.cli import main
from huddle.client.connection import connect
from huddle.client.security import Security
from huddle.coordinator.config import ServerConfig
from huddle.coordinator.security import listener
from huddle.coordinator.security.listener import ListenerSecurity
from huddle.coordinator.security.store import (
    FILE_NAME,
    FileStore,
    SecurityState,
    SecurityStoreError,
)
from huddle.coordinator.server import CoordinatorServer
from huddle.coordinator.storage.journal import JOURNAL
from huddle.protocol.errors import SaslAuthenticationFailedError
from tests.helpers import fast_server_config, running_server, serve_process, wait_until
from tests.security_setup import keep

ALICE = Security(username="alice", password="alice-pw")


async def authenticates(server: CoordinatorServer, security: Security = ALICE) -> bool:
    try:
        async with connect(f"127.0.0.1:{server.port}", security=security) as conn:
            return conn.principal == f"User:{security.username}"
    except SaslAuthenticationFailedError:
        return False


def health(server: CoordinatorServer) -> tuple[float | None, float | None]:
    """The store's gauge and failure counter, as Prometheus reads them."""
    assert server.metrics is not None
    registry = server.metrics.registry
    return (
        registry.get_sample_value("huddle_security_store_healthy"),
        registry.get_sample_value("huddle_security_store_failures_total"),
    )


def replace_file(path: Path, data: bytes) -> None:
    """Write ``path`` at once (a rename), as an editor saves it: never seen half-written."""
    temp = path.with_suffix(".new")
    temp.write_bytes(data)
    os.replace(temp, path)


def failed_events(logs: list[EventDict]) -> list[EventDict]:
    return [e for e in logs if e["event"] == "security_store_failed"]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[CoordinatorServer]:
    await keep(tmp_path, {"alice": "alice-pw"})
    config = fast_server_config(data_dir=str(tmp_path), sasl="SCRAM-SHA-512", metrics_port=0)
    async with running_server(config) as running:
        yield running


async def test_a_malformed_store_file_keeps_the_last_good_users(
    server: CoordinatorServer, tmp_path: Path, logs: list[EventDict]
) -> None:
    path = tmp_path / FILE_NAME
    good = path.read_bytes()
    assert health(server) == (1.0, 0.0)
    replace_file(path, b'{"users": {"alice": "not a user"}}')  # not what a user is
    await wait_until(lambda: failed_events(logs) != [], what="the failure logged")
    (failed,) = failed_events(logs)
    assert failed["log_level"] == "error"
    assert failed["where"] == str(path)
    assert await authenticates(server)  # served on with what was read last
    assert health(server) == (0.0, 1.0)
    replace_file(path, good)
    await wait_until(lambda: health(server)[0] == 1.0, what="the store to be taken again")
    assert any(e["event"] == "security_store_recovered" for e in logs)
    assert len(failed_events(logs)) == 1  # once for the fault, not every second


async def test_a_deleted_store_file_locks_nobody_out(
    server: CoordinatorServer,
    tmp_path: Path,
    logs: list[EventDict],
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / FILE_NAME).unlink()
    await wait_until(lambda: failed_events(logs) != [], what="the failure logged")
    assert "is gone" in failed_events(logs)[0]["error"]
    assert await authenticates(server)
    assert health(server) == (0.0, 1.0)
    # `huddle users add` then must not make a new store holding only the new user (with a
    # new decoy secret, no ACLs), which the coordinator would take: alice locked out
    (tmp_path / "pw").write_text("bob-pw\n")
    add = ["users", "add", "bob", "--password-file", str(tmp_path / "pw")]
    add += ["--data-dir", str(tmp_path), "--iterations", "4096"]
    assert await asyncio.to_thread(main, add, {}) == 1
    refusal = capsys.readouterr().err
    assert f"huddle: {tmp_path / FILE_NAME} does not exist, but {tmp_path} holds a " in refusal
    assert "was the store deleted?" in refusal
    assert "--new-store" in refusal
    assert not (tmp_path / FILE_NAME).exists()
    assert await authenticates(server)
    assert health(server) == (0.0, 1.0)
    # unless the operator says so: then the coordinator takes it, and says what went
    assert await asyncio.to_thread(main, [*add, "--new-store"], {}) == 0
    await wait_until(lambda: health(server)[0] == 1.0, what="the new store to be taken")
    (replaced,) = [e for e in logs if e["event"] == "security_store_replaced"]
    assert (replaced["log_level"], replaced["users"], replaced["users_gone"]) == ("warning", 1, 1)
    assert await authenticates(server, Security(username="bob", password="bob-pw"))
    assert not await authenticates(server)  # the new store has no alice


async def test_a_new_store_is_made_only_where_no_coordinator_kept_state(tmp_path: Path) -> None:
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    await keep(fresh, {"alice": "alice-pw"})  # before the first `huddle serve`: made
    assert (fresh / FILE_NAME).exists()
    used.mkdir()
    (used / JOURNAL).write_bytes(b"")  # a coordinator ran here, without users or ACLs
    with pytest.raises(SecurityStoreError, match="was the store deleted"):
        await keep(used, {"alice": "alice-pw"})
    assert not (used / FILE_NAME).exists()
    await FileStore(used).update(lambda state: state, create=True)
    await keep(used, {"alice": "alice-pw"})  # there is one now
    assert list((await FileStore(used).load()).users) == ["alice"]


class ScriptedStore:
    """A store whose polls answer what the test hands it, one at a time (an exception is
    raised)."""

    where = "scripted"

    def __init__(self) -> None:
        self.answers: asyncio.Queue[SecurityState | Exception | None] = asyncio.Queue()
        self.polls = 0  # polls begun

    async def load(self) -> SecurityState:
        return SecurityState()

    async def update(
        self, change: Callable[[SecurityState], SecurityState], *, create: bool = False
    ) -> SecurityState:
        raise NotImplementedError

    async def poll(self) -> SecurityState | None:
        self.polls += 1
        answer = await self.answers.get()
        if isinstance(answer, Exception):
            raise answer
        return answer


async def polled(answers: list[SecurityState | Exception | None]) -> list[bool]:
    """Whether the store was healthy after each of ``answers``."""
    security = ListenerSecurity(ServerConfig(sasl="SCRAM-SHA-512", data_dir="unused"))
    store = ScriptedStore()
    security.store = store
    seen: list[bool] = []
    task = asyncio.create_task(security._poll())
    try:
        for count, answer in enumerate(answers, start=2):
            store.answers.put_nowait(answer)
            # the next poll has begun: the answer was taken in
            await wait_until(lambda count=count: store.polls >= count, what="a poll")  # type: ignore[misc]
            seen.append(security.store_healthy)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert security.store_failures == sum(isinstance(a, Exception) for a in answers)
    return seen


async def test_health_follows_what_the_store_answers(
    monkeypatch: pytest.MonkeyPatch, logs: list[EventDict]
) -> None:
    monkeypatch.setattr(listener, "POLL_S", 0.001)
    away = ConnectionError("etcd is away")
    bad = SecurityStoreError("scripted is not a huddle security store")
    # not read for a while: healthy again at the next read, even with nothing changed
    assert await polled([away, away, None, None]) == [False, False, True, True]
    # unusable: unhealthy until a usable state is read, whatever the polls in between
    assert await polled([bad, None, away, None, SecurityState(), None]) == [
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    errors = [e["error"] for e in failed_events(logs)]
    assert errors == ["etcd is away", str(bad), "etcd is away"]  # once per fault


@pytest.mark.e2e
async def test_a_fifo_in_place_of_the_store_never_stalls_the_coordinator(tmp_path: Path) -> None:
    # A FIFO (or a file on a hung network file system) in place of security.json: a read
    # of it on the event loop waited for ever, and the coordinator answered nobody.
    await keep(tmp_path, {"alice": "alice-pw"})
    path = tmp_path / FILE_NAME
    flags = ["--data-dir", str(tmp_path), "--sasl", "SCRAM-SHA-512"]
    async with serve_process(*flags) as (_, port, events):
        fifo = tmp_path / "security.fifo"
        os.mkfifo(fifo)
        os.replace(fifo, path)
        try:

            def refused() -> bool:
                return any(
                    e["event"] == "security_store_failed"
                    and e["error"] == f"{path} is not a regular file"
                    for e in events
                )

            await wait_until(refused, what="the FIFO refused")
            async with connect(f"127.0.0.1:{port}", security=ALICE, timeout=5) as conn:
                assert conn.principal == "User:alice"  # served on, with the users read last
        finally:  # a reader stuck in the FIFO's open (before the fix) lets go
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


async def test_a_store_read_that_never_returns_fails_the_polls_after_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    await store.load()
    release = threading.Event()

    def stuck() -> SecurityState | None:
        release.wait(30)
        return None

    monkeypatch.setattr(store, "_poll_now", stuck)
    try:
        with pytest.raises(TimeoutError):  # the caller's deadline; the loop goes on
            await asyncio.wait_for(store.poll(), 0.05)
        with pytest.raises(TimeoutError, match="has not returned yet"):  # no second read
            await asyncio.wait_for(store.poll(), 1.0)
    finally:
        release.set()
    monkeypatch.undo()
    await wait_until(lambda: store._reading is not None and store._reading.done(), what="it")
    assert await store.poll() is None  # nothing changed since: read again, at once


async def test_closing_ends_a_poller_whose_cancel_was_swallowed() -> None:
    """Python 3.11's ``asyncio.wait_for`` can swallow a cancel that lands as the store's
    read completes; the poller then loops on. Closing must still end it (a server's
    close hung on it in the test suite)."""
    security = ListenerSecurity(ServerConfig(sasl="SCRAM-SHA-512", data_dir="unused"))
    swallowed, running = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        running.set()
        never = asyncio.Event()  # a store read that does not come back on its own
        while not security._closing:
            try:
                await never.wait()
            except asyncio.CancelledError:
                if swallowed.is_set():
                    raise
                swallowed.set()  # as wait_for returning the read's result instead

    security._poller = asyncio.create_task(stubborn())
    await asyncio.wait_for(running.wait(), 10)
    await asyncio.wait_for(security.close(), 10)
    assert swallowed.is_set()
