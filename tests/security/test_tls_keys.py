"""A key with a passphrase is refused with a clear reason, at the start (a bad setting) and
on a reload (the key in use is kept): OpenSSL would otherwise ask for the passphrase on
the coordinator's terminal, from its event loop, and the coordinator would hang."""

from __future__ import annotations

import os
import pty
import select
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization
from structlog.typing import EventDict

from tests.helpers import DEADLINE_S, RawClient, fast_server_config, running_server

ENCRYPTED = "encrypted keys are not supported"
SERVE = [sys.executable, "-m", "huddle", "serve", "--port", "0"]


def encrypted(key_pem: bytes) -> bytes:
    """The key under a passphrase, as `openssl genpkey -aes256` writes one."""
    private = serialization.load_pem_private_key(key_pem, None)
    return private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )


def encrypted_pair(directory: Path) -> tuple[Path, Path]:
    """A certificate and its key, the key under a passphrase."""
    issued = trustme.CA().issue_cert("127.0.0.1")
    cert, key = directory / "cert.pem", directory / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    key.write_bytes(encrypted(issued.private_key_pem.bytes()))
    return cert, key


def test_an_encrypted_key_is_refused_and_never_prompts_for_a_passphrase(tmp_path: Path) -> None:
    # `huddle serve` run in a terminal (a shell, tmux, `docker run -t`): loading a key with
    # a passphrase asked "Enter PEM pass phrase:" on the terminal from the event loop; the
    # coordinator answered nothing, and ignored SIGTERM, until one was typed.
    cert, key = encrypted_pair(tmp_path)
    code = (
        "import sys\n"
        "from huddle.coordinator.security.tls import ServerTls, TlsConfigError\n"
        "try:\n"
        "    ServerTls(sys.argv[1], sys.argv[2]).context()\n"
        "except TlsConfigError as exc:\n"
        "    print('refused:', exc, flush=True)\n"
    )
    pid, fd = pty.fork()  # a child with a terminal, as in an operator's shell
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-c", code, str(cert), str(key)])
    out = b""
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    break
                if not data:
                    break
                out += data
                if b"pass phrase" in out:
                    break
    finally:
        os.close(fd)
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert b"pass phrase" not in out, out
    assert b"refused:" in out, out
    assert ENCRYPTED.encode() in out, out


def test_serve_with_an_encrypted_key_is_a_bad_setting(tmp_path: Path) -> None:
    cert, key = encrypted_pair(tmp_path)
    done = subprocess.run(
        [*SERVE, "--tls-cert", str(cert), "--tls-key", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"TLS: the key {key} is encrypted (it has a passphrase): {ENCRYPTED}" in done.stderr


async def test_a_reload_to_an_encrypted_key_keeps_the_key_in_use(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    config = fast_server_config(tls_cert=str(cert), tls_key=str(key))
    trust = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    async with running_server(config) as server:
        assert server.security is not None
        began = time.monotonic()
        key.write_bytes(encrypted(issued.private_key_pem.bytes()))  # now with a passphrase
        server.security.reload_tls()
        assert time.monotonic() - began < DEADLINE_S
        (failed,) = [e for e in logs if e["event"] == "tls_reload_failed"]
        assert ENCRYPTED in failed["error"]
        raw = await RawClient.open(server.port, ssl=trust)  # the key in use, served on
        await raw.handshake()
        await raw.close()
