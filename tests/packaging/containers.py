"""Helpers for the container test: podman set up as docs/containers.md describes.

On these machines rootful podman works with runc and with no default ulimits (the runtime
may not raise RLIMIT_NOFILE to podman's 1048576), given by a containers.conf of our own.
Docker Hub cannot be reached, so the image is built on a local Debian base made with
debootstrap, and pip inside the build trusts the host's CA bundle through a mounted pip.conf.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import Call, Handshake, HandshakeResult, Reply, Request, Response

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/debian:bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
"""


class ContainerSetupError(Exception):
    """Podman or what it needs is missing: the test skips, or fails when it is required."""


@dataclass(frozen=True)
class Podman:
    """Runs podman with our containers.conf, every call bounded by a timeout."""

    executable: str
    env: Mapping[str, str]

    def run(
        self,
        *args: str,
        timeout: float,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        return run([self.executable, *args], env=self.env, timeout=timeout, check=check)

    def image_exists(self, image: str) -> bool:
        return self.run("image", "exists", image, timeout=30, check=False).returncode == 0


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command with a timeout; on failure raise with its output in the message."""
    try:
        proc = subprocess.run(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{' '.join(argv)} did not finish within {timeout} s") from exc
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {proc.returncode}\n"
            f"--- stdout ---\n{_tail(proc.stdout)}\n--- stderr ---\n{_tail(proc.stderr)}"
        )
    return proc


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def find_podman(workdir: Path) -> Podman:
    """Podman with a containers.conf written into ``workdir``; raises when podman is missing."""
    executable = shutil.which("podman")
    if executable is None:
        raise ContainerSetupError("podman is not installed (apt-get install podman runc)")
    if shutil.which("runc") is None:
        raise ContainerSetupError("runc is not installed (apt-get install runc)")
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(conf)
    podman = Podman(executable=executable, env=env)
    probe = podman.run("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=60, check=False)
    if probe.returncode != 0:
        raise ContainerSetupError(f"podman does not work here: {probe.stderr.strip()[-500:]}")
    return podman


def ensure_base_image(podman: Podman, workdir: Path, image: str = BASE_IMAGE) -> bool:
    """Make ``image`` (a minimal Debian bookworm) unless podman has it; True if it was made."""
    if podman.image_exists(image):
        return False
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ContainerSetupError(
            f"the base image {image} is missing and debootstrap is not installed to make it"
        )
    if os.geteuid() != 0:
        raise ContainerSetupError(f"the base image {image} is missing; making it needs root")
    rootfs = workdir / "rootfs"
    try:
        run(
            [debootstrap, "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR],
            timeout=600,
        )
        # apt's caches and package lists are a third of the tree; the image runs apt-get update.
        for sub in ("var/cache/apt", "var/lib/apt/lists"):
            for child in (rootfs / sub).iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-c", "."],
            stdout=subprocess.PIPE,
        )
        try:
            imported = subprocess.run(
                [
                    podman.executable,
                    "import",
                    "--change",
                    'CMD ["/bin/bash"]',
                    "-",
                    image,
                ],
                env=dict(podman.env),
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        finally:
            if tar.stdout is not None:
                tar.stdout.close()
            tar_rc = tar.wait(timeout=60)
        if tar_rc != 0 or imported.returncode != 0:
            raise AssertionError(
                f"importing {image} failed (tar exited {tar_rc}, podman import exited "
                f"{imported.returncode}): {imported.stderr.strip()[-2000:]}"
            )
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return True


def build_image(
    podman: Podman, workdir: Path, tag: str, base_image: str = BASE_IMAGE
) -> subprocess.CompletedProcess[str]:
    """Build the repository's Dockerfile; docker format so that HEALTHCHECK is kept."""
    args = [
        "build",
        "--format",
        "docker",
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "-t",
        tag,
    ]
    if HOST_CA_BUNDLE.is_file():
        # pip in the build goes through the same (possibly intercepting) proxy as the host.
        pip_conf = workdir / "pip.conf"
        pip_conf.write_text("[global]\ncert = /etc/pip-ci-ca.crt\n")
        args += [
            "-v",
            f"{pip_conf}:/etc/pip.conf:ro",
            "-v",
            f"{HOST_CA_BUNDLE}:/etc/pip-ci-ca.crt:ro",
        ]
    args.append(str(REPO_ROOT))
    return podman.run(*args, timeout=900)


def container_running(podman: Podman, name: str) -> bool:
    state = podman.run("inspect", "--format", "{{.State.Running}}", name, timeout=30, check=False)
    return state.returncode == 0 and state.stdout.strip() == "true"


def wait_for_port(
    podman: Podman, name: str, host: str, port: int, *, timeout: float = 60.0
) -> float:
    """Poll until ``host:port`` accepts a connection; return the seconds it took.

    Fails at once, with the container's logs, if the container stops while we wait.
    """
    start = time.monotonic()
    deadline = start + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return time.monotonic() - start
        except OSError:
            pass
        if not container_running(podman, name):
            raise AssertionError(
                f"container {name} stopped before listening on {port}:\n{logs(podman, name)}"
            )
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"nothing listened on {host}:{port} within {timeout} s:\n{logs(podman, name)}"
            )
        time.sleep(0.1)


def logs(podman: Podman, name: str) -> str:
    out = podman.run("logs", name, timeout=30, check=False)
    return _tail(out.stdout + out.stderr)


class BlockingClient:
    """A plain blocking-socket client of the wire protocol, for one connection."""

    def __init__(self, host: str, port: int, *, timeout: float = 15.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.settimeout(timeout)
        self._codec = ClientCodec()
        self._reader = FrameReader()
        self._pending: list[bytes] = []
        self._next_id = 1

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handshake(self, client_id: str) -> HandshakeResult:
        self._sock.sendall(self._codec.encode(Handshake(version=1, client_id=client_id)))
        while True:
            frame = self._read_frame()
            if isinstance(frame, HandshakeResult):
                return frame

    def call(self, request: Request) -> Response:
        """Send one request and return its response; notices pushed meanwhile are skipped."""
        correlation_id = self._next_id
        self._next_id += 1
        self._sock.sendall(self._codec.encode(Call(correlation_id=correlation_id, request=request)))
        while True:
            frame = self._read_frame()
            if isinstance(frame, Reply) and frame.correlation_id == correlation_id:
                return frame.response

    def _read_frame(self) -> object:
        while not self._pending:
            data = self._sock.recv(65536)
            if not data:
                raise AssertionError("the coordinator closed the connection")
            self._pending.extend(self._reader.feed(data))
        return self._codec.decode(self._pending.pop(0))
