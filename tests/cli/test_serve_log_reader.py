"""``huddle serve`` whatever becomes of its log's reader: a reader that has gone (``huddle
serve 2>&1 | head -1``) or one that stops reading never keeps the server from answering,
nor from stopping on SIGTERM with status 0."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from huddle.testing import free_port

from huddle import HuddleError
from huddle.client.connection import connect
from tests.cli.test_cli import CLI_TIMEOUT_S, huddle_argv

STOP_WITHIN_S = 10.0  # SIGTERM to exit: the shutdown, plus the 2 s the last lines may take


class Churn:
    """Clients connecting and handshaking, ``concurrency`` at a time; ``answered`` counts
    the handshakes answered (each within 10 s). Once one is not, the rest are not tried: a
    stalled server is told apart in seconds."""

    def __init__(self, bootstrap: str, concurrency: int = 20) -> None:
        self.bootstrap = bootstrap
        self.concurrency = concurrency
        self.answered = 0
        self.failed = False

    def run(self, count: int) -> int:
        """Make ``count`` connections; how many of them were answered."""
        before = self.answered
        asyncio.run(self._run(count))
        return self.answered - before

    async def _run(self, count: int) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one() -> None:
            async with gate:
                if self.failed:
                    return
                try:
                    async with connect(
                        self.bootstrap, client_id="churn", timeout=10, notices=False
                    ):
                        self.answered += 1
                except (OSError, TimeoutError, HuddleError):
                    self.failed = True

        await asyncio.gather(*(one() for _ in range(count)))


@pytest.fixture
def serve() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``huddle serve`` logging JSON to a pipe, once its first line (it listens) was read."""
    port = free_port()
    process = subprocess.Popen(
        huddle_argv("serve", "--port", str(port), "--log-format", "json"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        first = json.loads(process.stderr.readline())
        assert first["event"] == "server_listening"
        yield process, f"127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(CLI_TIMEOUT_S)
        if process.stderr is not None and not process.stderr.closed:
            process.stderr.close()


def stopped_by_sigterm(process: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then its exit status, or None if it is still running STOP_WITHIN_S later."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.e2e
def test_serve_answers_and_stops_after_its_log_reader_has_gone(
    serve: tuple[subprocess.Popen[bytes], str],
) -> None:
    """As ``huddle serve --log-format json 2>&1 | head -1``: the reader took one line and
    left; clients keep connecting, and SIGTERM under that load stops the server, status 0."""
    process, bootstrap = serve
    assert process.stderr is not None
    process.stderr.close()  # the reader is gone: every log line now meets EPIPE
    churn = Churn(bootstrap)
    assert churn.run(200) == 200
    load = threading.Thread(target=churn.run, args=(5000,), daemon=True)
    load.start()
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while churn.answered < 300 and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the load's progress, with a deadline
    assert churn.answered >= 300
    assert stopped_by_sigterm(process) == 0
    load.join(CLI_TIMEOUT_S)


@pytest.mark.e2e
def test_serve_answers_and_stops_while_its_log_reader_reads_nothing(
    serve: tuple[subprocess.Popen[bytes], str],
) -> None:
    """A reader that stops reading (a stuck pipe): once the pipe is full, log lines wait or
    are dropped, but the loop goes on answering, and SIGTERM stops the server promptly."""
    process, bootstrap = serve
    churn = Churn(bootstrap)
    # Each connection logs two lines of about 200 bytes: 1,000 fill a pipe's 64 KiB 6 times.
    assert churn.run(1000) == 1000
    started = time.monotonic()
    assert churn.run(20) == 20
    assert time.monotonic() - started < 10.0
    assert stopped_by_sigterm(process) == 0
