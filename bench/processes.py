"""The benchmarks' server processes, and the process plumbing around them.

* ``server_process`` starts a server (``huddle serve`` with ``huddle_serve(...)`` flags, or
  the echo server) as a child process on a free 127.0.0.1 port, optionally pinned to one CPU,
  waits until it accepts connections, and always stops it (SIGTERM, then SIGKILL) when the
  block is left; ``ServerProcess`` is what the block gets.
* ``raise_fd_limit``, ``pin_to_cpu`` and ``cpu_seconds`` for the load generators and the
  server; ``exit_on_sigterm`` / ``cancelled_by_sigterm`` let a benchmark stopped by SIGTERM
  clean up; ``new_event_loop`` is uvloop where it is installed, as ``huddle serve`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from huddle.testing import free_port

HOST: Final = "127.0.0.1"
T = TypeVar("T")


def huddle_command(port: int, *flags: str) -> list[str]:
    """``huddle serve`` on 127.0.0.1:``port`` logging warnings only, plus ``flags``."""
    script = Path(sys.executable).with_name("huddle")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "huddle"]
    return [
        *head,
        "serve",
        "--host",
        HOST,
        "--port",
        str(port),
        "--log-level",
        "warning",
        *flags,
    ]


def huddle_serve(*flags: str) -> Callable[[int], list[str]]:
    """The ``command`` for ``server_process``: ``huddle serve`` with these flags."""

    def command(port: int) -> list[str]:
        return huddle_command(port, *flags)

    return command


def checkout_env(checkout: Path, links: Path) -> dict[str, str]:
    """The environment that runs ``huddle`` from another checkout of the repository (a git
    worktree of main, say: ``--compare`` in the benchmarks), in this virtualenv: a tree of
    links to that checkout's parts in ``links``, first on the path."""
    package = links / "huddle"
    package.mkdir(parents=True, exist_ok=True)
    for part in sorted(checkout.glob("*/huddle")):
        for entry in part.iterdir():
            if entry.name != "__pycache__" and not (package / entry.name).exists():
                (package / entry.name).symlink_to(entry.resolve())
    if not (package / "__init__.py").exists():
        raise RuntimeError(f"{checkout} holds no huddle parts")
    return {**os.environ, "PYTHONPATH": str(links)}


def echo_command(port: int) -> list[str]:
    return [sys.executable, "-m", "bench.echo", "--host", HOST, "--port", str(port)]


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards ``wanted`` (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


def pin_to_cpu(pid: int, cpu: int | None) -> bool:
    """Pin ``pid`` (0: this process) to one CPU if there is such a CPU; True if pinned."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return False
    if not 0 <= cpu < (os.cpu_count() or 1):
        return False
    try:
        os.sched_setaffinity(pid, {cpu})
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class ServerProcess:
    name: str
    pid: int
    port: int


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``finally`` blocks (which stop the servers) run."""

    def handler(signum: int, _: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


async def cancelled_by_sigterm(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` as a task that SIGTERM cancels, so its ``finally`` blocks run; then
    exit with SystemExit(143). (A Python-level signal handler that raises inside an event
    loop callback is swallowed by uvloop: it has to go through the loop.)"""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    stopped = False

    def on_sigterm() -> None:
        nonlocal stopped
        stopped = True
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await task
    except asyncio.CancelledError:
        if stopped:
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        exit_on_sigterm()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """Linux: the child gets SIGTERM if this process dies without stopping it (SIGKILL)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG: Final = 1


def wait_listening(proc: subprocess.Popen[bytes], port: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not on port {port} within {wait_s} s") from exc
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def server_process(
    name: str,
    command: Callable[[int], Sequence[str]],
    *,
    cpu: int | None = None,
    attempts: int = 3,
    env: dict[str, str] | None = None,
) -> Iterator[ServerProcess]:
    """Run ``command(port)`` on a free port (with ``env``, if given: see ``checkout_env``);
    its output goes to our stderr; stopped on exit."""
    for attempt in range(attempts):
        port = free_port()
        proc = subprocess.Popen(
            list(command(port)),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
            stderr=sys.stderr,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        try:
            pin_to_cpu(proc.pid, cpu)
            try:
                wait_listening(proc, port, 20.0)
            except RuntimeError:
                if proc.poll() is not None and attempt + 1 < attempts:
                    continue  # the port was taken between free_port() and the bind: retry
                raise
            yield ServerProcess(name, proc.pid, port)
            return
        finally:
            _stop(proc)
    raise RuntimeError(f"{name} did not start")  # pragma: no cover - loop returns or raises


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (what ``huddle serve`` runs on), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
