"""The listener's TLS: an ``ssl.SSLContext`` with modern defaults, and client certificates.

TLS 1.2 is the least version taken. With a client CA (``--tls-client-ca``) every client must
present a certificate that CA signed (mTLS); the certificate's subject, written as RFC 2253
does (``CN=alice,O=acme``), is the client's principal: ``User:CN=alice,O=acme``, as
Kafka's default principal builder names it. A reload (SIGHUP) makes a whole new context
with ``ServerTls.load``, which fails unless the certificate, key and CA load together and
the certificate file's chain is whole and in order (``huddle.coordinator.security.chain``);
the listener then makes new connections use it (open ones keep theirs). A key with a
passphrase is refused: OpenSSL would ask for it on the terminal, from the event loop.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huddle.coordinator.security.chain import ChainError, Names, check_order, read_chain
from huddle.protocol.errors import HuddleError

# Short names RFC 4514 gives the attributes a subject usually has.
_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


class TlsConfigError(HuddleError, ValueError):
    """A certificate, key or CA that cannot be loaded: says which file and why."""


class _PassphraseError(HuddleError):
    """OpenSSL asked for a key's passphrase."""


def _no_passphrase() -> bytes:
    raise _PassphraseError


@dataclass(frozen=True, slots=True)
class ServerTls:
    cert: str
    key: str
    client_ca: str | None = None

    def context(self) -> ssl.SSLContext:
        return self.load()[0]

    def load(self) -> tuple[ssl.SSLContext, list[Names]]:
        """A new context with the certificate, key and client CA, and the certificate
        file's chain; TlsConfigError if they do not load together as a whole."""
        # Not create_default_context: that trusts the system's CAs too, and a client
        # certificate any public CA signed would pass mTLS. Only --tls-client-ca is trusted.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        for path in (self.cert, self.key, self.client_ca):
            if path is not None and not os.path.isfile(path):
                raise TlsConfigError(f"no such file: {path}")
        data = self._read(self.cert)
        try:
            context.load_cert_chain(self.cert, self.key, password=_no_passphrase)
        except _PassphraseError:
            raise TlsConfigError(
                f"the key {self.key} is encrypted (it has a passphrase): encrypted keys are "
                "not supported; give huddle the key without one (openssl pkey -in KEY -out "
                "NEW), in a file only huddle may read"
            ) from None
        except FileNotFoundError as exc:
            raise TlsConfigError(f"no such file: {exc.filename}") from None
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigError(
                f"cannot load the certificate {self.cert} with the key {self.key}: {exc}"
            ) from None
        try:  # what OpenSSL took for a chain may still be cut short or mixed up
            chain = read_chain(data, self.cert)
            check_order(chain, self.cert)
        except ChainError as exc:
            raise TlsConfigError(str(exc)) from None
        if self._read(self.cert) != data:  # what was checked is what was loaded
            raise TlsConfigError(f"{self.cert} changed while it was loaded; load it again")
        if self.client_ca is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca)
            except FileNotFoundError:
                raise TlsConfigError(f"no such file: {self.client_ca}") from None
            except (ssl.SSLError, OSError) as exc:
                raise TlsConfigError(f"cannot load the client CA {self.client_ca}: {exc}") from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context, chain

    @staticmethod
    def _read(path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise TlsConfigError(f"cannot read {path}: {exc.strerror}") from None


def subject_name(cert: Mapping[str, Any]) -> str:
    """A certificate's subject as RFC 2253 writes it: most specific first, comma-separated."""
    parts: list[str] = []
    for rdn in reversed(cert.get("subject", ())):
        attrs = "+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn)
        parts.append(attrs)
    return ",".join(parts)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def certificate_principal(cert: Mapping[str, Any] | None) -> str | None:
    """``User:<subject>`` for a verified client certificate, None without one."""
    if not cert:
        return None
    name = subject_name(cert)
    return f"User:{name}" if name else None
