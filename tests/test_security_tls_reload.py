"""A certificate reload (SIGHUP) takes a whole, consistent certificate, key and client CA,
or nothing: a half-written pair never takes TLS down."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import trustme
from structlog.typing import EventDict

from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.messages import ListGroupsRequest, ListGroupsResponse
from tests.helpers import RawClient, fast_server_config, running_server


def write_pair(issued: trustme.LeafCert, cert: Path, key: Path | None) -> None:
    """The certificate (and, unless ``key`` is None, its key) into their files."""
    issued.cert_chain_pems[0].write_to_path(str(cert))
    if key is not None:
        issued.private_key_pem.write_to_path(str(key))


async def served(server: CoordinatorServer, trust: ssl.SSLContext) -> bytes:
    """The certificate a new TLS connection is served (DER), once the connection works."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=trust)
    raw = RawClient(reader, writer)
    try:
        await raw.handshake()
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert isinstance(der, bytes)
        return der
    finally:
        await raw.close()


def der(issued: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(issued.cert_chain_pems[0].bytes().decode())


async def test_a_half_written_pair_keeps_the_old_one_and_a_whole_one_is_taken(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    ca = trustme.CA()
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    old, new = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    write_pair(old, cert, key)
    trust = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    config = fast_server_config(tls_cert=str(cert), tls_key=str(key))
    async with running_server(config) as server:
        assert server.security is not None
        kept = await RawClient.open(server.port, ssl=trust)
        await kept.handshake()
        assert await served(server, trust) == der(old)

        write_pair(new, cert, None)  # the new certificate is written, its key not yet
        server.security.reload_tls()
        (failed,) = [e for e in logs if e["event"] == "tls_reload_failed"]
        assert failed["log_level"] == "error"
        assert str(cert) in failed["error"]
        assert await served(server, trust) == der(old)  # served on, as before

        write_pair(new, cert, key)  # and now its key
        server.security.reload_tls()
        assert [e["event"] for e in logs if e["event"].startswith("tls_")] == [
            "tls_reload_failed",
            "tls_reloaded",
        ]
        assert await served(server, trust) == der(new)
        # the connection made before both reloads goes on
        listed = await kept.call(ListGroupsRequest())
        assert isinstance(listed, ListGroupsResponse)
        assert listed.error_code == 0
        await kept.close()


@pytest.mark.parametrize("broken", ["missing key", "garbage key", "missing certificate"])
async def test_a_reload_that_cannot_load_changes_nothing(
    tmp_path: Path, logs: list[EventDict], broken: str
) -> None:
    ca = trustme.CA()
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    issued = ca.issue_cert("127.0.0.1")
    write_pair(issued, cert, key)
    trust = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    async with running_server(fast_server_config(tls_cert=str(cert), tls_key=str(key))) as server:
        assert server.security is not None
        if broken == "missing key":
            key.unlink()
        elif broken == "garbage key":
            key.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
        else:
            cert.unlink()
        server.security.reload_tls()
        assert [e["event"] for e in logs if e["event"].startswith("tls_")] == ["tls_reload_failed"]
        assert await served(server, trust) == der(issued)


async def test_a_reload_takes_the_client_ca_file_as_it_is_now(tmp_path: Path) -> None:
    server_ca, old_clients, new_clients = trustme.CA(), trustme.CA(), trustme.CA()
    cert, key, client_ca = tmp_path / "s.crt", tmp_path / "s.key", tmp_path / "clients.pem"
    write_pair(server_ca.issue_cert("127.0.0.1"), cert, key)
    old_clients.cert_pem.write_to_path(str(client_ca))
    config = fast_server_config(tls_cert=str(cert), tls_key=str(key), tls_client_ca=str(client_ca))

    def client(ca: trustme.CA) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=server_ca.cert_pem.bytes().decode())
        ca.issue_cert("client@example.org", common_name="client").configure_cert(context)
        return context

    async def admitted(context: ssl.SSLContext) -> bool:
        try:
            await served(server, context)
        except (ssl.SSLError, ConnectionError, AssertionError):
            return False  # TLS 1.3: the refusal comes after the client's handshake ends
        return True

    async with running_server(config) as server:
        assert server.security is not None
        assert await admitted(client(old_clients))
        assert not await admitted(client(new_clients))
        new_clients.cert_pem.write_to_path(str(client_ca))  # the old CA taken out
        server.security.reload_tls()
        assert await admitted(client(new_clients))
        assert not await admitted(client(old_clients))
