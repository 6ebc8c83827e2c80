"""The opening of a client connection: the TCP (or TLS) stream, then huddle's handshake.

``open_stream`` connects within a deadline and turns what goes wrong into huddle's errors:
``TlsError`` (the TLS handshake failed, with the likely reason), ``ConnectTimeoutError``,
``CoordinatorUnreachableError`` (refused, no route, a name that does not resolve) or
``ConnectionClosedError`` (dropped in the middle of the TLS handshake; retriable).

``HandshakeExchange`` then sends ``Handshake`` and reads ``HandshakeResult``, and runs the
SASL exchange when the client's ``Security`` has credentials, before the connection's reader
runs. What the coordinator said about itself (version, node, disconnect grace, principal)
stays in its fields, and so do the frames that arrived with its last answer, for the reader.
A connection closed unanswered is explained: a TLS listener drops a plain client, a TLS
server drops a client whose certificate it refuses.
"""

from __future__ import annotations

import ssl
from typing import TypeVar

import anyio
import anyio.abc
import msgspec

from huddle.client.connection_errors import ConnectionClosedError
from huddle.client.sasl import SaslExchange
from huddle.client.security import Security, TlsError
from huddle.client.unreachable import (
    CLIENT_CERT_REFUSED,
    PLAIN_TO_TLS,
    ConnectTimeoutError,
    cannot_connect,
)
from huddle.protocol.errors import HuddleError, raise_for
from huddle.protocol.framing import ClientCodec, FrameReader
from huddle.protocol.messages import (
    PROTOCOL_VERSION,
    ClientFrame,
    Handshake,
    HandshakeResult,
    ProtocolError,
    SaslAuthenticate,
    SaslAuthenticateResult,
    ServerFrame,
)

H = TypeVar("H", HandshakeResult, SaslAuthenticateResult)


def _tls_cause(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a connection closed during the handshake, if one is."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _tls_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the coordinator's certificate was refused: {exc.verify_message}"
    reason = exc.reason or str(exc)
    if reason == "WRONG_VERSION_NUMBER":  # the first bytes back were not TLS
        return (
            "it did not answer in TLS (WRONG_VERSION_NUMBER): the listener probably has no "
            "TLS (drop --tls/--tls-ca), or the address is not a coordinator's"
        )
    if "ALERT" in str(reason).upper():  # the coordinator refused this client's certificate
        return f"the coordinator refused the connection ({reason}): check the client certificate"
    return str(reason)


async def open_stream(
    bootstrap: str, host: str, port: int, security: Security, timeout: float
) -> anyio.abc.ByteStream:
    """A TCP stream to ``host:port`` (TLS when ``security`` says so) within ``timeout`` s."""
    context = security.context()
    try:
        with anyio.fail_after(timeout):
            if context is None:
                return await anyio.connect_tcp(host, port)
            return await anyio.connect_tcp(
                host,
                port,
                ssl_context=context,
                tls_hostname=security.server_hostname or host,
                tls_standard_compatible=False,
            )
    except ssl.SSLError as exc:
        raise TlsError(f"TLS handshake with {bootstrap} failed: {_tls_reason(exc)}") from exc
    except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        # dropped in the middle of the TLS handshake (a coordinator restarting, say):
        # retriable, as any lost connection
        reason = f"{bootstrap} closed the connection during the TLS handshake"
        raise ConnectionClosedError(reason) from exc
    except TimeoutError:
        raise ConnectTimeoutError(bootstrap, timeout, "connect", login=False) from None
    except OSError as exc:  # refused, no route, a name that does not resolve
        raise cannot_connect(bootstrap, exc) from exc


class HandshakeExchange:
    """The handshake of one new connection, over its stream, before its reader runs."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        *,
        client_id: str,
        security: Security,
        incarnation: bytes | None,
        max_frame_bytes: int,
        version: int = PROTOCOL_VERSION,
    ) -> None:
        self._stream = stream
        self.version = version  # the protocol version the handshake names
        self._client_id = client_id
        self._security = security
        self._incarnation = incarnation  # sent in the handshake, shown nowhere
        self.reader = FrameReader(max_frame_bytes)
        self.codec = ClientCodec()
        self.early: list[bytes] = []  # frame bodies read with the last answer
        self.server_version = 0
        self.disconnect_grace_ms = -1  # as the coordinator announced it
        self.node_id = ""  # the node connected to, as it named itself
        self.principal = ""  # who the coordinator says this client is, once authenticated
        # the versions a coordinator that refused ours speaks (an older one)
        self.refused_for: list[int] = []

    async def run(self, bootstrap: str) -> None:
        """The handshake (and SASL exchange); a closed connection that looks like a TLS
        failure raises TlsError, or ConnectionClosedError with a hint about the certificate."""
        try:
            await self._handshake()
        except ConnectionClosedError as exc:
            tls_failure = _tls_cause(exc)
            if tls_failure is not None and not isinstance(tls_failure, ssl.SSLEOFError):
                reason = _tls_reason(tls_failure)
                raise TlsError(f"TLS with {bootstrap} failed: {reason}") from exc
            if not self._security.uses_tls or self.server_version:
                raise
            # A TLS server drops a client whose certificate it refuses without a word
            # the client can read: say what it most likely means (and stay retriable:
            # a coordinator going away mid-handshake looks the same).
            raise ConnectionClosedError(
                f"{bootstrap} closed the TLS connection before the handshake: it refuses "
                "this client's certificate (not signed by its client CA, or expired) or "
                f"requires one ({exc.message})",
                tls_hint=CLIENT_CERT_REFUSED,
            ) from exc

    async def _send(self, frame: ClientFrame) -> None:
        data = self.codec.encode(frame)
        try:
            await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise ConnectionClosedError(f"connection lost: {exc}") from exc

    async def _receive_frame(self) -> ServerFrame:
        """The next frame (the reader task is not running yet).

        Frames that arrived with it (a notice right after the handshake result) are kept
        for the reader.
        """
        heard = False
        while not self.early:
            try:
                data = await self._stream.receive()
            except anyio.EndOfStream:
                raise self._closed_in_handshake(heard) from None
            except (anyio.BrokenResourceError, OSError) as exc:
                reason = f"connection lost during the handshake: {exc or type(exc).__name__}"
                raise ConnectionClosedError(reason) from exc
            heard = True
            self.early.extend(self.reader.feed(data))
        return self.codec.decode(self.early.pop(0))

    def _closed_in_handshake(self, heard: bool) -> ConnectionClosedError:
        """Why the connection closed before the first answer: a TLS listener closes a plain
        client's connection without a word (it cannot read the handshake), and so does a
        proxy or port forward with nothing behind it."""
        if heard or self.server_version or self._security.uses_tls:
            reason = "the coordinator closed the connection during the handshake"
            return ConnectionClosedError(reason)
        return ConnectionClosedError(
            "the coordinator closed the connection without answering the handshake: it "
            "probably requires TLS (the CLI's --tls-ca CA or --tls; Security(ca_file=...)), "
            "or the address is a proxy or port forward with no coordinator behind it",
            tls_hint=PLAIN_TO_TLS,
        )

    async def _handshake(self) -> None:
        mechanism = self._security.sasl_mechanism
        hello = Handshake(
            version=self.version,
            client_id=self._client_id,
            sasl_mechanism=mechanism,
            incarnation=self._incarnation,
        )
        await self._send(hello)
        frame = await self._handshake_frame(HandshakeResult)
        self.server_version = frame.version
        self.disconnect_grace_ms = frame.disconnect_grace_ms
        self.node_id = frame.node_id
        self.principal = frame.principal  # its certificate's (mTLS), until a SASL exchange
        if mechanism is not None:
            await self._authenticate(mechanism)

    async def _authenticate(self, mechanism: str) -> None:
        """The SASL exchange; raises SaslAuthenticationFailedError (or another
        AuthenticationError) when the coordinator refuses it."""
        username, password = self._security.username, self._security.password
        assert username is not None
        assert password is not None
        exchange = SaslExchange(mechanism, username, password)
        message: bytes | None = exchange.first()
        while message is not None:
            await self._send(SaslAuthenticate(auth_bytes=message))
            result = await self._handshake_frame(SaslAuthenticateResult)
            message = exchange.answer(result.auth_bytes, complete=result.complete)
            if result.complete:
                self.principal = result.principal
                return
        raise ConnectionClosedError("the coordinator did not complete the SASL exchange")

    async def _handshake_frame(self, expect: type[H]) -> H:
        """The next frame of the handshake, of type ``expect``; raises the error it carries."""
        try:
            frame = await self._receive_frame()
        except ConnectionClosedError:
            raise
        except (HuddleError, msgspec.MsgspecError) as exc:
            message = f"bad handshake answer from the coordinator: {exc}"
            raise ConnectionClosedError(message) from exc
        if isinstance(frame, HandshakeResult) and frame.error_code:
            self.refused_for = list(frame.supported_versions)
        if isinstance(frame, ProtocolError | HandshakeResult | SaslAuthenticateResult):
            raise_for(frame.error_code, frame.error_message)
        if not isinstance(frame, expect):
            kind = type(frame).__name__
            raise ConnectionClosedError(f"expected a {expect.__name__}, got {kind}")
        return frame
