"""The client commands' TLS and SASL flags (``huddle ping``, ``topics``, ``groups``, ...).

Each flag has a ``HUDDLE_CLIENT_*`` or ``HUDDLE_*`` variable, so a container's health check
and scripts set them once. The password is never a flag: ``--password-file`` or
``HUDDLE_PASSWORD``. A TLS file that is missing or cannot be loaded is a bad setting (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from huddle.cli.usage import UsageError
from huddle.client.security import (
    SASL_MECHANISMS,
    PlainWithoutTlsError,
    Security,
    TlsError,
    read_password_file,
)

_FLAGS = (
    ("--tls-ca", "HUDDLE_CLIENT_TLS_CA", "TLS: trust the coordinator's certificate by this CA"),
    ("--tls-cert", "HUDDLE_CLIENT_TLS_CERT", "TLS: this client's certificate (mTLS), PEM"),
    ("--tls-key", "HUDDLE_CLIENT_TLS_KEY", "TLS: the client certificate's key, PEM"),
    (
        "--tls-server-name",
        "HUDDLE_CLIENT_TLS_SERVER_NAME",
        "TLS: the name the coordinator's certificate must have (default: the host dialled)",
    ),
    ("--username", "HUDDLE_USERNAME", "SASL: authenticate as this user"),
    ("--password-file", "HUDDLE_PASSWORD_FILE", "SASL: the password, first line of this file"),
)


def add_security_flags(parser: argparse.ArgumentParser) -> None:
    for flag, env, text in _FLAGS:
        parser.add_argument(flag, default=None, help=f"{text} [env {env}]")
    parser.add_argument(
        "--tls", action="store_true", default=None, help="TLS, trusting the system's CAs"
    )
    parser.add_argument(
        "--sasl-mechanism",
        type=str.upper,
        choices=SASL_MECHANISMS,
        default=None,
        help="SASL mechanism (default SCRAM-SHA-512) [env HUDDLE_SASL_MECHANISM]",
    )


def security_of(args: argparse.Namespace, environ: Mapping[str, str]) -> Security:
    """The client's ``Security`` from flags, else environment; UsageError if inconsistent."""

    def value(flag: str, env: str) -> str | None:
        given = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        return given if given is not None else environ.get(env) or None

    ca, cert, key, server_name, username, password_file = (value(f, e) for f, e, _ in _FLAGS)
    password = environ.get("HUDDLE_PASSWORD") or None
    if password_file is not None:
        try:
            password = read_password_file(password_file)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if username is not None and not password:
        raise UsageError("--username needs a password: --password-file or HUDDLE_PASSWORD")
    mechanism = args.sasl_mechanism or environ.get("HUDDLE_SASL_MECHANISM") or "SCRAM-SHA-512"
    try:
        security = Security(
            tls=bool(args.tls),
            ca_file=ca,
            cert_file=cert,
            key_file=key,
            server_hostname=server_name,
            username=username,
            password=password if username is not None else None,
            mechanism=mechanism.upper(),
        )
        security.context()  # a TLS file missing or unreadable is a bad setting
    except TlsError as exc:
        raise UsageError(f"TLS: {exc.message}") from None
    except (ValueError, PlainWithoutTlsError) as exc:
        raise UsageError(str(exc)) from None
    return security
