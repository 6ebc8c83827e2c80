"""How a client proves who it is and checks who it talks to: TLS and SASL settings.

``Security`` is given to ``Member``, ``Admin`` and ``connect``. TLS is on when a CA file,
a client certificate, an ``ssl.SSLContext`` or ``tls=True`` (the system's CAs) is given;
the coordinator's certificate is always verified, and its name checked against the host
connected to (``server_hostname`` names another). TLS 1.2 is the least version used.
With ``username`` and ``password`` the client authenticates by SASL: SCRAM-SHA-512 by
default, SCRAM-SHA-256, or PLAIN, which is refused here over a connection without TLS (it
sends the password itself).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from huddle.protocol.errors import AuthenticationError, ClientError, InvalidArgumentError

SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


class TlsError(ClientError, AuthenticationError):
    """The TLS handshake failed: a certificate not trusted, expired, or of another name, on
    either side. Not retried: the configuration is wrong."""


class PlainWithoutTlsError(ClientError, AuthenticationError):
    """PLAIN sends the password itself: this client sends it only over TLS."""


@dataclass(frozen=True)
class Security:
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None  # None: the key is in cert_file
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    mechanism: str = "SCRAM-SHA-512"

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise InvalidArgumentError("give both a username and a password, or neither")
        if self.username is not None and self.mechanism not in SASL_MECHANISMS:
            raise InvalidArgumentError(
                f"SASL mechanism {self.mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}"
            )
        if self.ssl_context is not None and (self.ca_file or self.cert_file):
            raise InvalidArgumentError("give an ssl_context or CA and certificate files, not both")
        if self.key_file is not None and self.cert_file is None:
            raise InvalidArgumentError("a key_file needs its cert_file")
        if self.username is not None and self.mechanism == "PLAIN" and not self.uses_tls:
            raise PlainWithoutTlsError(
                "SASL PLAIN sends the password itself: use it over TLS (give a CA file or "
                "tls=True), or use SCRAM-SHA-512"
            )

    @property
    def uses_tls(self) -> bool:
        return bool(self.tls or self.ca_file or self.cert_file or self.ssl_context is not None)

    @property
    def sasl_mechanism(self) -> str | None:
        return self.mechanism if self.username is not None else None

    def context(self) -> ssl.SSLContext | None:
        """The SSL context connections use, None without TLS. ``TlsError`` if a file cannot
        be loaded."""
        if self.ssl_context is not None:
            return self.ssl_context
        return self._files_context if self.uses_tls else None

    @functools.cached_property
    def _files_context(self) -> ssl.SSLContext:
        """Made from the files once (every connection of a member uses it)."""
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path is not None and not os.path.isfile(path):
                raise TlsError(f"no such file: {path}")
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            if self.cert_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise TlsError(f"cannot load the TLS files: {exc}") from None
        return context


NO_SECURITY = Security()

# The variables ``Security.from_env`` reads (the CLI's client flags fall back to them).
ENV_TLS_CA = "HUDDLE_CLIENT_TLS_CA"
ENV_TLS_CERT = "HUDDLE_CLIENT_TLS_CERT"
ENV_TLS_KEY = "HUDDLE_CLIENT_TLS_KEY"
ENV_TLS_SERVER_NAME = "HUDDLE_CLIENT_TLS_SERVER_NAME"
ENV_USERNAME = "HUDDLE_USERNAME"
ENV_PASSWORD = "HUDDLE_PASSWORD"
ENV_PASSWORD_FILE = "HUDDLE_PASSWORD_FILE"
ENV_MECHANISM = "HUDDLE_SASL_MECHANISM"


def read_password_file(path: str) -> str:
    """A password: the first line of ``path``; ValueError if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror}") from None


def security_from_env(environ: Mapping[str, str]) -> Security:
    """A client's ``Security`` from ``HUDDLE_CLIENT_TLS_CA``, ``HUDDLE_CLIENT_TLS_CERT``,
    ``HUDDLE_CLIENT_TLS_KEY``, ``HUDDLE_CLIENT_TLS_SERVER_NAME``, ``HUDDLE_USERNAME``,
    ``HUDDLE_PASSWORD`` (or ``HUDDLE_PASSWORD_FILE``) and ``HUDDLE_SASL_MECHANISM``: how the
    chaos harness's worker processes and scripts are told to use a secured coordinator.
    ValueError if they do not fit together (or a password file cannot be read)."""

    def get(name: str) -> str | None:
        return environ.get(name) or None

    password = get(ENV_PASSWORD)
    password_file = get(ENV_PASSWORD_FILE)
    if password_file is not None:
        password = read_password_file(password_file)
    username = get(ENV_USERNAME)
    return Security(
        ca_file=get(ENV_TLS_CA),
        cert_file=get(ENV_TLS_CERT),
        key_file=get(ENV_TLS_KEY),
        server_hostname=get(ENV_TLS_SERVER_NAME),
        username=username,
        password=password if username is not None else None,
        mechanism=(get(ENV_MECHANISM) or "SCRAM-SHA-512").upper(),
    )
