"""``huddle users``, ``huddle acls``, the client commands' TLS and SASL flags, and
``huddle serve``'s security settings, as a user types them."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from structlog.typing import EventDict

from huddle.cli import main
from huddle.coordinator.security.store import decode_state
from tests.helpers import fast_server_config, running_server
from tests.security_setup import make_pki


def users(*argv: str, data: Path) -> int:
    return main(["users", *argv, "--data-dir", str(data)], {})


def test_users_are_added_listed_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert users("add", "alice", "--password-stdin", "--iterations", "4096", data=tmp_path) == 0
    (tmp_path / "pw").write_text("other\n")
    pw = str(tmp_path / "pw")
    assert (
        users("add", "bob", "--password-file", pw, "--mechanism", "SCRAM-SHA-256", data=tmp_path)
        == 0
    )
    capsys.readouterr()
    assert users("list", "--json", data=tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "one JSON document on one line, as every --json"
    listed = json.loads(out)
    assert listed == [
        {"name": "alice", "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"], "iterations": 4096},
        {"name": "bob", "mechanisms": ["SCRAM-SHA-256"], "iterations": 8192},
    ]
    assert "s3cret" not in (tmp_path / "security.json").read_text()
    assert users("list", data=tmp_path) == 0
    assert capsys.readouterr().out.splitlines() == [  # aligned columns, as every listing
        "USER   MECHANISMS                   ITERATIONS",
        "alice  SCRAM-SHA-256,SCRAM-SHA-512  4096",
        "bob    SCRAM-SHA-256                8192",
    ]
    assert users("remove", "alice", data=tmp_path) == 0
    assert users("remove", "alice", data=tmp_path) == 1
    assert "no user alice" in capsys.readouterr().err
    assert users("add", "bad name", "--password-file", pw, data=tmp_path) == 2
    assert users("add", "carol", "--password-file", pw, "--iterations", "10", data=tmp_path) == 2
    assert "4096" in capsys.readouterr().err


async def test_ping_names_the_principal_of_a_client_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], logs: list[EventDict]
) -> None:
    """Under mTLS the client is its certificate's subject; ``huddle ping`` says so, as it
    says the SASL user's name."""
    pki = make_pki(tmp_path)
    config = fast_server_config(tls_cert=pki.server, tls_key=pki.server, tls_client_ca=pki.ca)
    async with running_server(config) as server:
        ping = ["ping", "--bootstrap", f"127.0.0.1:{server.port}"]
        ping += ["--tls-ca", pki.ca, "--tls-cert", pki.alice]
        assert await asyncio.to_thread(main, ping, {}) == 0
        out = capsys.readouterr().out
        assert out.endswith(f"127.0.0.1:{server.port} as User:CN=alice,OU=eng,O=acme\n")
        assert await asyncio.to_thread(main, [*ping, "--json"], {}) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["principal"] == "User:CN=alice,OU=eng,O=acme"


def test_users_need_to_know_where_the_store_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["users", "list"], {}) == 2
    assert "--data-dir" in capsys.readouterr().err


def kept_acls(data: Path) -> int:
    return len(decode_state((data / "security.json").read_bytes(), "store").acls)


def test_acls_are_added_listed_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = ["--data-dir", str(tmp_path)]
    add = ["acls", "add", "--principal", "User:alice", "--operation", "read"]
    assert main([*add, "--operation", "describe", "--group", "orders-", "--prefixed", *d], {}) == 0
    assert (
        main(
            [
                "acls",
                "add",
                "--principal",
                "User:*",
                "--operation",
                "all",
                "--topic",
                "*",
                "--deny",
                *d,
            ],
            {},
        )
        == 0
    )
    assert (
        main(
            ["acls", "add", "--principal", "User:ops", "--operation", "describe", "--cluster", *d],
            {},
        )
        == 0
    )
    capsys.readouterr()
    assert main(["acls", "list", "--principal", "User:alice", *d], {}) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "ALLOW User:alice from * to DESCRIBE GROUP orders- (prefixed)",
        "ALLOW User:alice from * to READ GROUP orders- (prefixed)",
    ]
    assert kept_acls(tmp_path) == 4
    remove = ["acls", "remove", "--principal", "User:alice", "--operation", "read"]
    assert main([*remove, "--group", "orders-", "--prefixed", *d], {}) == 0
    assert main([*remove, "--group", "orders-", "--prefixed", *d], {}) == 1
    assert "nothing removed" in capsys.readouterr().err
    assert kept_acls(tmp_path) == 3
    # bad input: a clear error, nothing changed
    assert (
        main(["acls", "add", "--principal", "alice", "--operation", "read", "--group", "g", *d], {})
        == 2
    )
    assert "TYPE:NAME" in capsys.readouterr().err
    assert kept_acls(tmp_path) == 3


async def test_ping_and_topics_with_tls_and_a_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pki = make_pki(tmp_path)
    data = tmp_path / "data"
    (tmp_path / "pw").write_text("pw-of-admin\n")
    add_admin = ["users", "add", "admin", "--password-file", str(tmp_path / "pw")]
    assert await asyncio.to_thread(main, [*add_admin, "--data-dir", str(data)], {}) == 0
    config = fast_server_config(
        data_dir=str(data),
        tls_cert=pki.server,
        tls_key=pki.server,
        sasl="SCRAM-SHA-512",
        authorizer=True,
        super_users="User:admin",
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        capsys.readouterr()
        as_admin = [
            "--tls-ca",
            pki.ca,
            "--username",
            "admin",
            "--password-file",
            str(tmp_path / "pw"),
        ]
        code = await asyncio.to_thread(main, ["ping", "--bootstrap", bootstrap, *as_admin], {})
        assert code == 0
        assert "as User:admin" in capsys.readouterr().out
        # no credentials: it answers, and says it wants them (a health check passes)
        code = await asyncio.to_thread(
            main, ["ping", "--bootstrap", bootstrap, "--tls-ca", pki.ca], {}
        )
        assert code == 0
        assert "requires authentication" in capsys.readouterr().out
        env = {
            "HUDDLE_CLIENT_TLS_CA": pki.ca,
            "HUDDLE_USERNAME": "admin",
            "HUDDLE_PASSWORD": "pw-of-admin",
        }
        create = ["topics", "create", "t", "--partitions", "2", "--bootstrap", bootstrap]
        assert await asyncio.to_thread(main, create, env) == 0
        wrong = {**env, "HUDDLE_PASSWORD": "guess"}
        assert (
            await asyncio.to_thread(main, ["topics", "list", "--bootstrap", bootstrap], wrong) == 1
        )
        assert "SASL_AUTHENTICATION_FAILED" in capsys.readouterr().err
        # without the CA: the coordinator's certificate is not trusted
        no_ca = ["topics", "list", "--bootstrap", bootstrap, "--tls"]
        assert await asyncio.to_thread(main, no_ca, {**env, "HUDDLE_CLIENT_TLS_CA": ""}) == 1
        assert "certificate was refused" in capsys.readouterr().err


def test_serve_refuses_security_settings_that_cannot_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--sasl", "PLAIN", "--data-dir", str(tmp_path)], {}) == 2
    assert "PLAIN sends passwords in the clear" in capsys.readouterr().err
    assert main(["serve", "--authorizer"], {}) == 2
    assert "--data-dir" in capsys.readouterr().err


def test_a_missing_or_bad_tls_file_is_a_bad_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the README says: a bad setting exits 2, in one line, before anything starts."""
    missing = str(tmp_path / "missing.pem")
    assert main(["serve", "--port", "0", "--tls-cert", missing, "--tls-key", missing], {}) == 2
    assert capsys.readouterr().err == f"huddle: TLS: no such file: {missing}\n"
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    junk = str(tmp_path / "junk.pem")
    assert main(["serve", "--port", "0", "--tls-cert", junk, "--tls-key", junk], {}) == 2
    err = capsys.readouterr().err
    assert err.startswith("huddle: TLS: cannot load the certificate")
    assert err.count("\n") == 1
    for command in (["ping"], ["topics", "list"], ["groups", "describe", "g"]):
        assert main([*command, "--tls-ca", missing], {}) == 2
        assert capsys.readouterr().err == f"huddle: TLS: no such file: {missing}\n"
    assert main(["ping"], {"HUDDLE_CLIENT_TLS_CA": junk}) == 2
    assert capsys.readouterr().err.startswith("huddle: TLS: cannot load the TLS files")


async def test_sighup_reloads_the_certificate_and_keeps_connections(tmp_path: Path) -> None:
    import signal

    import trustme

    from huddle.client.connection import connect
    from huddle.client.security import Security, TlsError
    from huddle.protocol.messages import ListGroupsRequest, ListGroupsResponse
    from tests.helpers import serve_process, wait_until

    old, new = trustme.CA(), trustme.CA()
    cert = tmp_path / "server.pem"
    old.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    old.cert_pem.write_to_path(str(tmp_path / "old-ca.pem"))
    new.cert_pem.write_to_path(str(tmp_path / "new-ca.pem"))
    trust_old = Security(ca_file=str(tmp_path / "old-ca.pem"))
    trust_new = Security(ca_file=str(tmp_path / "new-ca.pem"))
    flags = ["--tls-cert", str(cert), "--tls-key", str(cert)]
    # a certificate of another CA, with other names: a reload takes it only when told to
    async with serve_process(*flags, "--tls-allow-name-changes") as (process, port, events):
        bootstrap = f"127.0.0.1:{port}"
        async with connect(bootstrap, security=trust_old) as kept:
            new.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
            process.send_signal(signal.SIGHUP)
            await wait_until(
                lambda: any(e["event"] == "tls_reloaded" for e in events), what="the reload"
            )
            async with connect(bootstrap, security=trust_new) as fresh:
                assert (await fresh.call(ListGroupsRequest(), ListGroupsResponse)).error_code == 0
            with pytest.raises(TlsError, match="certificate was refused"):
                async with connect(bootstrap, security=trust_old):
                    raise AssertionError("the old certificate is still served")
            # the connection made before the reload goes on
            assert (await kept.call(ListGroupsRequest(), ListGroupsResponse)).error_code == 0
