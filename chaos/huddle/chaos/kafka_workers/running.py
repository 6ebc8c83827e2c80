"""Driver processes as the tests and the benchmark run them: started by ``Drivers.start``,
their JSON lines collected as they come, waited on with deadlines, stopped by PID.

``Drivers.wait(check, timeout)`` returns as soon as ``check()`` gives something other than
None or False (checked again after every line any driver prints), or raises
``DriverTimeoutError`` saying what each driver last reported.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any, Final, TypeVar

from huddle.chaos.kafka_workers import launch
from huddle.chaos.kafka_workers.emit import Partition
from huddle.chaos.kafka_workers.options import DriverOptions
from huddle.chaos.procs import die_with_parent
from huddle.protocol.errors import HuddleError, UsageError

T = TypeVar("T")
STOP_S: Final = 20.0  # a driver's clean close (commit, LeaveGroup) before SIGKILL
OWNERSHIP: Final = frozenset({"assigned", "revoked", "lost", "left"})


class DriverTimeoutError(HuddleError, AssertionError):
    """What was waited for did not happen in time."""


class Driver:
    """One driver process and the events it printed so far."""

    def __init__(self, name: str, client: str, proc: subprocess.Popen[str], group: Drivers):
        self.name = name
        self.client = client
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.killed = False
        self._group = group

    @property
    def pid(self) -> int:
        return self.proc.pid

    def of(self, event: str, since: float = 0.0) -> list[dict[str, Any]]:
        """This driver's ``event`` lines stamped at or after ``since`` (monotonic)."""
        return [e for e in list(self.events) if e["event"] == event and e["mono"] >= since]

    def last(self, event: str) -> dict[str, Any] | None:
        found = self.of(event)
        return found[-1] if found else None

    @property
    def owned(self) -> frozenset[Partition]:
        """What the driver last said it owns (nothing once killed or gone)."""
        if self.killed or self.proc.poll() is not None:
            return frozenset()
        for e in reversed(list(self.events)):
            if e["event"] in OWNERSHIP:
                return frozenset((t, p) for t, p in e["owned"])
        return frozenset()

    @property
    def owned_since(self) -> float:
        """When its ownership last changed (monotonic), or 0."""
        for e in reversed(list(self.events)):
            if e["event"] in OWNERSHIP:
                return float(e["mono"])
        return 0.0

    def kill(self) -> float:
        """SIGKILL now; returns when it was sent (monotonic)."""
        self.killed = True
        at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_S)
        return at

    def terminate(self) -> float:
        """SIGTERM now (the driver closes its consumer); returns when it was sent."""
        at = time.monotonic()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        return at

    def stop(self, grace_s: float = STOP_S) -> int:
        """SIGTERM, wait ``grace_s`` for it to leave and exit, then SIGKILL; reaped."""
        self.terminate()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
        return int(self.proc.returncode)


class Drivers:
    """The drivers of one test or measurement; every one is stopped when the block ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.all: dict[str, Driver] = {}
        self._changed = threading.Condition()

    def __enter__(self) -> Drivers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, name: str, client: str, options: DriverOptions) -> Driver:
        """Client ``client``'s driver as ``name``, with ``options``."""
        if name in self.all and self.all[name].proc.poll() is None:
            raise UsageError(f"driver {name} is running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / f"{name}.stderr", "a") as err:
            proc = subprocess.Popen(
                launch.command(client, options),
                env=launch.environment(client),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                preexec_fn=die_with_parent,
            )
        driver = Driver(name, client, proc, self)
        self.all[name] = driver
        assert proc.stdout is not None
        threading.Thread(target=self._read, args=(driver, proc.stdout), daemon=True).start()
        return driver

    def _read(self, driver: Driver, stream: IO[str]) -> None:
        with open(self.log_dir / f"{driver.name}.jsonl", "a") as copy:
            for line in stream:
                copy.write(line)
                copy.flush()
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict) and "event" in event and "mono" in event:
                    with self._changed:
                        driver.events.append(event)
                        self._changed.notify_all()
        with self._changed:  # it exited: a check may be waiting on that too
            self._changed.notify_all()

    def wait(self, check: Callable[[], T | None], timeout: float, what: str) -> T:
        """``check()``'s first value that is not None or False, re-checked after each line;
        DriverTimeoutError (naming ``what`` and each driver's last line) after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = check()
                if value is not None and value is not False:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DriverTimeoutError(f"{what}: not within {timeout} s; {self.summary()}")
                self._changed.wait(min(left, 0.5))

    def summary(self) -> str:
        parts = []
        for d in self.all.values():
            last = d.events[-1] if d.events else None
            state = "running" if d.proc.poll() is None else f"exit {d.proc.returncode}"
            shown = {k: v for k, v in (last or {}).items() if k not in ("client", "pid", "ts")}
            parts.append(f"{d.name} ({d.client}, {state}): {shown or 'no line'}")
        return "; ".join(parts)

    def balanced(self, names: Iterable[str], partitions: Iterable[Partition]) -> float | None:
        """When the named drivers came to own ``partitions`` between them, each some and
        none twice (the monotonic time of the last change), or None if they do not now."""
        drivers = [self.all[n] for n in names]
        wanted = frozenset(partitions)
        owned = [d.owned for d in drivers]
        if any(not o for o in owned) or sum(len(o) for o in owned) != len(wanted):
            return None
        if frozenset().union(*owned) != wanted:
            return None
        return max(d.owned_since for d in drivers)

    def close(self) -> None:
        """Stop every driver still running: SIGTERM together, one grace, then SIGKILL."""
        live = [d for d in self.all.values() if d.proc.poll() is None]
        for d in live:
            d.terminate()
        deadline = time.monotonic() + STOP_S
        for d in live:
            try:
                d.proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                d.kill()


def partitions_of(topic: str, count: int) -> frozenset[Partition]:
    return frozenset((topic, p) for p in range(count))
