"""Child processes of a chaos run: started on 127.0.0.1, dying with the harness, stopped by PID.

Every process the harness starts goes through ``spawn`` (which asks Linux to SIGTERM the
child if the harness dies without stopping it) and is ended with ``stop`` (SIGTERM, then
SIGKILL after a grace) — never by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from huddle.protocol.errors import HuddleError

HOST: Final = "127.0.0.1"
_PR_SET_PDEATHSIG: Final = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """Linux: the child gets SIGTERM when the harness dies without stopping it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


die_with_parent = _die_with_parent  # a Popen's preexec_fn, for children started elsewhere


def spawn(
    argv: Sequence[str], *, stdout: Path, stderr: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with output appended to files; no stdin; dies with this process."""
    stdout.parent.mkdir(parents=True, exist_ok=True)
    with open(stdout, "ab") as out:
        err = open(stderr, "ab") if stderr is not None else None  # noqa: SIM115
        try:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err if err is not None else subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        finally:
            if err is not None:
                err.close()


def signal_pid(proc: subprocess.Popen[bytes], signum: int) -> bool:
    """Send ``signum`` to the process if it still runs; True if sent."""
    if proc.poll() is not None:
        return False
    try:
        os.kill(proc.pid, signum)
    except ProcessLookupError:
        return False
    return True


def stop(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> int:
    """SIGTERM (after SIGCONT, in case it is frozen), wait ``grace_s``, then SIGKILL; reaped."""
    if proc.poll() is None:
        signal_pid(proc, signal.SIGCONT)
        signal_pid(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            signal_pid(proc, signal.SIGKILL)
            proc.wait(timeout=10)
    return int(proc.returncode)


def stop_all(procs: Sequence[subprocess.Popen[bytes]], grace_s: float = 5.0) -> None:
    """SIGTERM all at once, one shared grace, then SIGKILL whatever is left; all reaped."""
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        signal_pid(proc, signal.SIGCONT)
        signal_pid(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    for proc in live:
        if proc.poll() is None:
            signal_pid(proc, signal.SIGKILL)
            proc.wait(timeout=10)


class NotListeningError(HuddleError, RuntimeError):
    """A process exited, or did not listen in time, before it accepted a connection."""


def wait_listening(proc: subprocess.Popen[bytes], port: int, wait_s: float) -> None:
    """Until something accepts on ``port``; NotListeningError if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + wait_s
    while True:
        if proc.poll() is not None:
            raise NotListeningError(f"process exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise NotListeningError(
                    f"nothing listening on port {port} within {wait_s} s"
                ) from exc
            time.sleep(0.05)  # pacing a startup poll, not a test


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat[stat.rindex(")") + 2] != "Z"
