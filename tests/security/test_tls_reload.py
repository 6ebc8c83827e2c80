"""A certificate reload (SIGHUP) takes a whole, consistent certificate, key and client CA,
or nothing: a half-written pair, or a chain cut short, never takes TLS down; and it keeps
the certificate's names (subject, SANs, the CA its chain ends at) unless told otherwise."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from structlog.typing import EventDict

from huddle.coordinator.security.chain import ChainError, changes, read_chain
from huddle.coordinator.security.tls import ServerTls, TlsConfigError
from huddle.coordinator.server import CoordinatorServer
from huddle.protocol.messages import ListGroupsRequest, ListGroupsResponse
from tests.helpers import RawClient, fast_server_config, running_server


def issue(ca: trustme.CA) -> trustme.LeafCert:
    """A server certificate for 127.0.0.1 whose names are the same every time (trustme
    makes up a new subject for each by default: a reload would refuse it)."""
    return ca.issue_cert("127.0.0.1", organization_unit_name="huddle tests")


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


@dataclass(frozen=True)
class Pairs:
    """Two certificates of the same names by one CA: ``old`` in ``cert`` and ``key``, and
    ``new`` to reload; ``trust`` verifies both."""

    cert: Path
    key: Path
    old: trustme.LeafCert
    new: trustme.LeafCert
    trust: ssl.SSLContext


def old_and_new(directory: Path) -> Pairs:
    ca = trustme.CA()
    cert, key = directory / "server.crt", directory / "server.key"
    old, new = issue(ca), issue(ca)
    write_pair(old, cert, key)
    trust = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    return Pairs(cert, key, old, new, trust)


async def test_a_half_written_pair_keeps_the_old_one_and_a_whole_one_is_taken(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    pairs = old_and_new(tmp_path)
    cert, key, old, new, trust = pairs.cert, pairs.key, pairs.old, pairs.new, pairs.trust
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


def reloads(logs: list[EventDict]) -> list[str]:
    return [e["event"] for e in logs if e["event"].startswith("tls_")]


@dataclass
class Chained:
    """A server certificate by an intermediate CA: the file holds the leaf, then the
    intermediate; clients trust the root only."""

    cert: Path
    key: Path
    leaf: bytes
    intermediate: bytes
    trust: ssl.SSLContext

    @classmethod
    def make(cls, directory: Path) -> Chained:
        root = trustme.CA()
        issued = root.create_child_ca().issue_cert("127.0.0.1")
        leaf, intermediate = (pem.bytes() for pem in issued.cert_chain_pems)
        cert, key = directory / "server.crt", directory / "server.key"
        cert.write_bytes(leaf + intermediate)
        issued.private_key_pem.write_to_path(str(key))
        trust = ssl.create_default_context(cadata=root.cert_pem.bytes().decode())
        return cls(cert, key, leaf, intermediate, trust)

    async def connects(self, server: CoordinatorServer) -> None:
        raw = await RawClient.open(server.port, ssl=self.trust)
        await raw.handshake()
        await raw.close()


async def test_a_chain_cut_after_its_leaf_is_not_taken_by_a_reload(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    # A certificate file holding the leaf and its intermediate, rewritten in place, with a
    # SIGHUP when only the leaf is written (an inotify-driven reloader does that): taken,
    # every new TLS connection would fail ("unable to get local issuer certificate")
    # until another SIGHUP, even once the file is whole again.
    tls = Chained.make(tmp_path)
    config = fast_server_config(tls_cert=str(tls.cert), tls_key=str(tls.key))
    async with running_server(config) as server:
        assert server.security is not None
        await tls.connects(server)
        tls.cert.write_bytes(tls.leaf)  # the leaf written, so far
        server.security.reload_tls()
        tls.cert.write_bytes(tls.leaf + tls.intermediate)  # the write completes
        await tls.connects(server)  # was: "unable to get local issuer certificate"
    (failed,) = [e for e in logs if e["event"] == "tls_reload_failed"]
    assert "changes the CA its chain ends at" in failed["error"]
    assert reloads(logs) == ["tls_reload_failed"]


async def test_a_chain_cut_within_a_certificate_or_mixed_up_is_not_taken(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    tls = Chained.make(tmp_path)
    cert, key = tls.cert, tls.key
    leaf, intermediate = tls.leaf, tls.intermediate
    async with running_server(fast_server_config(tls_cert=str(cert), tls_key=str(key))) as server:
        assert server.security is not None
        broken = {
            "cut within the intermediate": leaf + intermediate[: len(intermediate) // 2],
            "an intermediate of another chain": leaf + trustme.CA().cert_pem.bytes(),
            "the intermediate first": intermediate + leaf,
        }
        for content in broken.values():
            cert.write_bytes(content)
            server.security.reload_tls()
        errors = [e["error"] for e in logs if e["event"] == "tls_reload_failed"]
        assert len(errors) == 3, reloads(logs)
        assert str(cert) in errors[0]  # OpenSSL's "bad end line", or ours
        assert "certificate 2 of" in errors[1]
        assert "is not the issuer of certificate 1" in errors[1]
        assert "cannot load the certificate" in errors[2]  # the key is not the first's
        assert reloads(logs) == ["tls_reload_failed"] * 3
        await tls.connects(server)  # served on, whole
    # and the same files refused at the start: what a reload refuses is never served
    cert.write_bytes(broken["an intermediate of another chain"])
    with pytest.raises(TlsConfigError, match="is not the issuer of certificate 1"):
        ServerTls(str(cert), str(key)).load()


@pytest.mark.parametrize("allowed", [False, True])
async def test_a_reload_keeps_the_certificates_names_unless_allowed(
    tmp_path: Path, logs: list[EventDict], allowed: bool
) -> None:
    # as Kafka refuses a reload that changes the subject or drops a SAN (SslFactory's
    # CertificateEntries.ensureCompatible) unless ssl.allow.dn.changes / .san.changes
    ca = trustme.CA()
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"

    def named(*sans: str, unit: str = "huddle tests") -> trustme.LeafCert:
        return ca.issue_cert(*sans, organization_unit_name=unit)

    first = named("127.0.0.1", "localhost")
    write_pair(first, cert, key)
    trust = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    config = fast_server_config(
        tls_cert=str(cert), tls_key=str(key), tls_allow_name_changes=allowed
    )
    async with running_server(config) as server:
        assert server.security is not None
        served_now = der(first)
        for issued, change in (
            (named("127.0.0.1", "localhost"), None),  # renewed: a new key, the same names
            (named("127.0.0.1", "localhost", "h.example"), None),  # a name more
            (named("127.0.0.1", "h.example"), "its subject alternative names (one in use"),
            (
                named("127.0.0.1", "localhost", "h.example", unit="other"),
                "the certificate's subject",
            ),
        ):
            logs.clear()
            write_pair(issued, cert, key)
            server.security.reload_tls()
            if change is None or allowed:
                assert reloads(logs) == ["tls_reloaded"]
                served_now = der(issued)
            else:
                (failed,) = [e for e in logs if e["event"] == "tls_reload_failed"]
                assert change in failed["error"]
                assert "--tls-allow-name-changes" in failed["error"]
            assert await served(server, trust) == served_now


def test_a_chains_names_are_read_from_each_certificate() -> None:
    root = trustme.CA()
    issued = root.create_child_ca().issue_cert("127.0.0.1", "localhost")
    leaf, intermediate = (pem.bytes() for pem in issued.cert_chain_pems)
    chain = read_chain(leaf + intermediate, "f")
    assert [len(c.alt_names) for c in chain] == [2, 0]
    assert chain[0].issuer == chain[1].subject != chain[1].issuer
    assert changes(chain, read_chain(leaf, "f")) == [
        "the CA its chain ends at (a chain cut short ends lower)"
    ]
    assert changes(chain, read_chain(leaf + intermediate + root.cert_pem.bytes(), "f")) == []
    for broken, why in (
        (b"", "holds no certificate"),
        (leaf + b"-----BEGIN CERTIFICATE-----\nMIIB", "not complete"),
        (leaf.replace(b"MII", b"MIX", 1), "certificate 1 of f cannot be read"),
    ):
        with pytest.raises(ChainError, match=why):
            read_chain(broken, "f")
