"""A certificate file's chain, as a reload checks it before it is served.

``read_chain`` takes the PEM certificates of a file, in order, each parsed by OpenSSL, and
reads from each the names a chain is checked by: its subject, its issuer and its subject
alternative names, as DER (compared byte for byte; no crypto library is needed for that).

* ``check_order``: each certificate after the first is the issuer of the one before it
  (RFC 5246 7.4.2: "each following certificate MUST directly certify the one preceding
  it"), so a file mixing two chains, or a certificate of the wrong chain, is refused.
* ``changes``: what a new chain changes that a reload keeps by default: the leaf's subject
  and its subject alternative names (none may go; more may come), as Kafka's
  ``SslFactory`` refuses a reload otherwise unless ``ssl.allow.dn.changes`` /
  ``ssl.allow.san.changes``; and where the chain ends, the issuer of its last certificate:
  a chain cut short (the leaf written, its intermediate not yet) ends lower than the one
  in use, and no client could verify it.
"""

from __future__ import annotations

import itertools
import re
import ssl
from dataclasses import dataclass

from huddle.protocol.errors import HuddleError

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n(.*?)-----END CERTIFICATE-----", re.DOTALL)
_BEGIN = b"-----BEGIN CERTIFICATE-----"
_SEQUENCE = 0x30
_EXTENSIONS = 0xA3  # [3] in TBSCertificate
_SAN_OID = bytes.fromhex("0603551d11")  # 2.5.29.17, subjectAltName, as DER


class ChainError(HuddleError, ValueError):
    """A certificate file whose chain cannot be served: says why."""


@dataclass(frozen=True, slots=True)
class Names:
    """One certificate's names, as DER."""

    subject: bytes
    issuer: bytes
    alt_names: frozenset[bytes]  # each GeneralName of its subjectAltName


def read_chain(data: bytes, where: str) -> list[Names]:
    """The certificates of a PEM file's ``data``, in order; ChainError if it holds none,
    one that is cut short, or one OpenSSL cannot parse."""
    blocks = _PEM.findall(data)
    if data.count(_BEGIN) != len(blocks):
        raise ChainError(f"{where} holds a certificate that is not complete (cut short?)")
    if not blocks:
        raise ChainError(f"{where} holds no certificate")
    chain = []
    for number, block in enumerate(blocks, 1):
        pem = b"-----BEGIN CERTIFICATE-----\n" + block + b"-----END CERTIFICATE-----\n"
        try:
            der = ssl.PEM_cert_to_DER_cert(pem.decode("ascii"))
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
            chain.append(_names(der))
        except (ValueError, ssl.SSLError, IndexError) as exc:
            raise ChainError(f"certificate {number} of {where} cannot be read: {exc}") from None
    return chain


def check_order(chain: list[Names], where: str) -> None:
    """ChainError unless each certificate after the first issued the one before it."""
    for number, (child, parent) in enumerate(itertools.pairwise(chain), 1):
        if child.issuer != parent.subject:
            raise ChainError(
                f"certificate {number + 1} of {where} is not the issuer of certificate "
                f"{number}: each certificate after the first must certify the one before it"
            )


def changes(old: list[Names], new: list[Names]) -> list[str]:
    """What ``new`` changes that a reload keeps by default (nothing: an empty list)."""
    changed = []
    if new[0].subject != old[0].subject:
        changed.append("the certificate's subject")
    if not new[0].alt_names >= old[0].alt_names:
        changed.append("its subject alternative names (one in use is gone)")
    if new[-1].issuer != old[-1].issuer:
        changed.append("the CA its chain ends at (a chain cut short ends lower)")
    return changed


# --- DER, just enough of X.509 (RFC 5280 4.1) ------------------------------------------


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: (tag, where its value starts, where it ends)."""
    tag = der[at]
    length = der[at + 1]
    start = at + 2
    if length & 0x80:
        size = length & 0x7F
        if not 1 <= size <= 4:
            raise ChainError("a DER length that is not definite")
        length = int.from_bytes(der[start : start + size], "big")
        start += size
    end = start + length
    if end > len(der):
        raise ChainError("a DER element longer than the certificate")
    return tag, start, end


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements within ``der[start:end]``: (tag, element start, value start, end)."""
    found = []
    at = start
    while at < end:
        tag, value, stop = _element(der, at)
        found.append((tag, at, value, stop))
        at = stop
    return found


def _names(der: bytes) -> Names:
    tag, start, _ = _element(der, 0)
    if tag != _SEQUENCE:
        raise ChainError("not a DER certificate")
    tag, tbs_start, tbs_end = _element(der, start)
    fields = _children(der, tbs_start, tbs_end)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, ...
    if len(fields) < 6:
        raise ChainError("a certificate without its subject")
    issuer = der[fields[2][1] : fields[2][3]]
    subject = der[fields[4][1] : fields[4][3]]
    alt_names: frozenset[bytes] = frozenset()
    for tag, _, value, stop in fields[6:]:
        if tag == _EXTENSIONS:
            alt_names = _alt_names(der, value, stop)
    return Names(subject=subject, issuer=issuer, alt_names=alt_names)


def _alt_names(der: bytes, start: int, end: int) -> frozenset[bytes]:
    (_, _, value, stop), *_ = _children(der, start, end)  # Extensions ::= SEQUENCE OF
    for _, _, ext_value, ext_end in _children(der, value, stop):
        parts = _children(der, ext_value, ext_end)  # extnID, critical?, extnValue
        if der[parts[0][1] : parts[0][3]] != _SAN_OID:
            continue
        _, _, octets, octets_end = parts[-1]
        (_, _, names, names_end), *_ = _children(der, octets, octets_end)  # GeneralNames
        return frozenset(der[a:b] for _, a, _, b in _children(der, names, names_end))
    return frozenset()
