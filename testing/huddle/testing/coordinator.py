"""``huddle serve`` as a child process for a test: a free loopback port, its log events,
and faults (``kill``, ``restart``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from huddle.protocol.addresses import free_port
from huddle.protocol.errors import HuddleError

START_TIMEOUT_S = 30.0
# Fast group rules for tests: a group forms as soon as its members join, short sessions pass.
TEST_FLAGS: tuple[str, ...] = (
    "--initial-rebalance-delay-ms",
    "0",
    "--min-session-timeout-ms",
    "100",
)


class CoordinatorError(HuddleError, RuntimeError):
    """The coordinator did not start, or stopped by itself; says why with its last words.
    A ``HuddleError``, and a ``RuntimeError`` as before."""


class CoordinatorProcess:
    """``huddle serve`` on 127.0.0.1 and a free port, as a child process.

    ``start()`` (or ``with``) runs it and waits until it listens; ``bootstrap`` is its
    ``HOST:PORT``; ``log`` every event it logged, as dicts; ``events(name)`` the events of
    one name. ``kill()`` is SIGKILL; ``restart()`` starts it again on the same port (with
    ``data_dir``, which is a temporary directory unless given, it keeps its topics and
    offsets); ``stop()`` is SIGTERM, waited for. ``flags`` go to ``huddle serve`` after
    the test rules (``TEST_FLAGS``).
    """

    def __init__(
        self,
        flags: Sequence[str] = (),
        *,
        data_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = True,
    ) -> None:
        self.flags = list(flags)
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None and keep_data:
            self._own_dir = tempfile.TemporaryDirectory(prefix="huddle-test-")
            data_dir = self._own_dir.name
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.port = 0
        self.log: list[dict[str, Any]] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._listening = threading.Event()

    # --- running ---------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        if not self.port:
            raise CoordinatorError("the coordinator was not started")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        if self.running:
            raise CoordinatorError("the coordinator is running already")
        port = self.port or free_port()
        argv = [sys.executable, "-m", "huddle", "serve", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--log-format", "json", *TEST_FLAGS]
        if self.data_dir is not None:
            argv += ["--data-dir", str(self.data_dir)]
        argv += self.flags
        self._listening.clear()
        self._process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._reader = threading.Thread(
            target=self._read, args=(self._process,), name="huddle-coordinator-log", daemon=True
        )
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._listening.wait(0.05):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._reader.join(5)
                last = [e.get("event", e) for e in self.log[-5:]]
                self.kill()
                raise CoordinatorError(f"huddle serve did not start; its last words: {last}")
        self.port = port
        return self

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace").strip()
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "output", "line": line}
            if not isinstance(event, dict):
                event = {"event": "output", "line": line}
            self.log.append(event)
            if event.get("event") == "server_listening":
                self._listening.set()

    def events(self, name: str) -> list[dict[str, Any]]:
        """The events of one name it logged so far (``member_removed``, ...)."""
        return [e for e in list(self.log) if e.get("event") == name]

    def kill(self) -> None:
        """SIGKILL: gone at once, nothing flushed (its data dir keeps what it kept)."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM: it answers what it holds, closes its connections and exits."""
        self._end(signal.SIGTERM)

    def restart(self) -> Self:
        """Stop it if it runs (SIGTERM), and start it again on the same port."""
        if self.running:
            self.stop()
        return self.start()

    def _end(self, signum: int) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(5)
        if process.stderr is not None:
            process.stderr.close()
        self._process = None

    def close(self) -> None:
        """Stop it and remove its temporary data dir."""
        self.stop()
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()  # its temporary data dir too
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
