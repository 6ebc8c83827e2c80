"""Users and ACLs of a cluster, kept in etcd: ``huddle users`` and ``huddle acls`` with
``--etcd``, read by a node at start and again when they change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from structlog.typing import EventDict

from huddle.cli import main
from huddle.client.connection import connect
from huddle.client.security import Security
from huddle.coordinator.cluster.store import EtcdStore
from huddle.coordinator.security.store import EtcdSecurityStore
from huddle.protocol.errors import SaslAuthenticationFailedError
from tests.cli.test_cli import run_huddle
from tests.etcd import Etcd, etcd
from tests.helpers import fast_server_config, running_server, wait_until

__all__ = ["etcd"]  # the fixture

PREFIX = "/secured"


async def test_a_cluster_node_authenticates_users_kept_in_etcd(etcd: Etcd, tmp_path: Path) -> None:
    endpoint = f"etcd://{etcd.host}:{etcd.port}"
    (tmp_path / "pw").write_text("alice-pw\n")
    store_flags = ["--etcd", endpoint, "--cluster-prefix", PREFIX]
    add = ["users", "add", "alice", "--password-file", str(tmp_path / "pw"), *store_flags]
    assert await asyncio.to_thread(main, add, {}) == 0
    config = fast_server_config(
        cluster=endpoint, cluster_prefix=PREFIX, sasl="SCRAM-SHA-512", authorizer=True
    )
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        security = Security(username="alice", password="alice-pw")
        async with connect(bootstrap, security=security) as conn:
            assert conn.principal == "User:alice"
        with pytest.raises(SaslAuthenticationFailedError):
            async with connect(bootstrap, security=Security(username="alice", password="x")):
                raise AssertionError("a wrong password was accepted")
        acl = ["acls", "add", "--principal", "User:alice", "--operation", "read", "--group", "g"]
        assert await asyncio.to_thread(main, [*acl, *store_flags], {}) == 0
        assert server.security is not None
        auth = server.security.authorizer
        assert auth is not None
        await wait_until(lambda: len(auth.acls) == 1, what="the node to read the new ACL")
        # removed in etcd: the node forgets the user within a second too
        remove = ["users", "remove", "alice", *store_flags]
        assert await asyncio.to_thread(main, remove, {}) == 0
        await wait_until(lambda: not server.security.users, what="the user to be forgotten")  # type: ignore[union-attr]


async def test_concurrent_updates_in_etcd_lose_nothing(etcd: Etcd) -> None:
    from huddle.coordinator.security.credentials import make_user
    from huddle.coordinator.security.store import SecurityState

    stores = [await EtcdStore.connect([etcd.endpoint]) for _ in range(4)]
    try:

        async def add(index: int) -> None:
            user = make_user(f"u{index}", "pw", iterations=4096)

            def change(state: SecurityState) -> SecurityState:
                return SecurityState(
                    users={**state.users, user.name: user},
                    acls=state.acls,
                    decoy_secret=state.decoy_secret,
                )

            await EtcdSecurityStore(stores[index], PREFIX).update(change)

        await asyncio.gather(*(add(i) for i in range(4)))
        state = await EtcdSecurityStore(stores[0], PREFIX).load()
        assert sorted(state.users) == ["u0", "u1", "u2", "u3"]
        assert state.decoy_secret
    finally:
        for store in stores:
            await store.close()


async def test_a_bad_or_deleted_store_in_etcd_keeps_the_last_good_users(
    etcd: Etcd, tmp_path: Path, logs: list[EventDict], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"etcd://{etcd.host}:{etcd.port}"
    (tmp_path / "pw").write_text("alice-pw\n")
    add = ["users", "add", "alice", "--password-file", str(tmp_path / "pw")]
    assert (
        await asyncio.to_thread(main, [*add, "--etcd", endpoint, "--cluster-prefix", PREFIX], {})
        == 0
    )
    config = fast_server_config(
        cluster=endpoint, cluster_prefix=PREFIX, sasl="SCRAM-SHA-512", metrics_port=0
    )
    key = f"{PREFIX}/security".encode()
    store = await EtcdStore.connect([etcd.endpoint])
    try:
        good = await store.get(key)
        assert good is not None
        async with running_server(config) as server:
            assert server.metrics is not None
            registry = server.metrics.registry

            def healthy() -> float | None:
                return registry.get_sample_value("huddle_security_store_healthy")

            def failures() -> float | None:
                return registry.get_sample_value("huddle_security_store_failures_total")

            async def alice_gets_in() -> bool:
                security = Security(username="alice", password="alice-pw")
                async with connect(f"127.0.0.1:{server.port}", security=security) as conn:
                    return conn.principal == "User:alice"

            assert (healthy(), failures()) == (1.0, 0.0)
            for count, fault in enumerate(("malformed", "deleted"), start=1):
                if fault == "malformed":
                    await store.put(key, b"{not json")
                else:
                    await store.delete(key)
                await wait_until(lambda c=count: failures() == c, what=f"the {fault} store seen")  # type: ignore[misc]
                assert healthy() == 0.0
                assert await alice_gets_in()  # served on with what was read last
                failed = [e for e in logs if e["event"] == "security_store_failed"]
                assert len(failed) == count
                assert failed[-1]["log_level"] == "error"
                assert failed[-1]["where"] == f"etcd key {key.decode()}"
            # deleted: `huddle users add` makes no new store holding only its user, which
            # the node would take (alice locked out), while the cluster keeps its state
            await store.put(f"{PREFIX}/config/shards".encode(), b"6")  # as a node writes it
            (tmp_path / "bob.pw").write_text("bob-pw\n")
            add_bob = ["users", "add", "bob", "--password-file", str(tmp_path / "bob.pw")]
            add_bob += ["--etcd", endpoint, "--cluster-prefix", PREFIX]
            assert await asyncio.to_thread(main, add_bob, {}) == 1
            refusal = capsys.readouterr().err
            assert f"etcd key {key.decode()} does not exist, but the cluster under" in refusal
            assert "--new-store" in refusal
            assert await store.get(key) is None
            assert await alice_gets_in()
            await store.put(key, good.value)
            await wait_until(lambda: healthy() == 1.0, what="the store to be taken again")
            assert await alice_gets_in()
    finally:
        await store.close()


def test_json_listings_from_etcd_print_json_alone(etcd: Etcd, tmp_path: Path) -> None:
    """``huddle users list --etcd ... --json`` (and ``acls``): stdout is the JSON document
    alone, as a pipe into ``jq`` needs; the etcd client's log events are not on it."""
    store = ["--etcd", f"etcd://{etcd.host}:{etcd.port}", "--cluster-prefix", PREFIX]
    (tmp_path / "pw").write_text("alice-pw\n")
    added = run_huddle("users", "add", "alice", "--password-file", str(tmp_path / "pw"), *store)
    assert added.returncode == 0, added.stderr
    acl = ["acls", "add", "--principal", "User:alice", "--operation", "read", "--group", "g"]
    assert run_huddle(*acl, *store).returncode == 0
    users = run_huddle("users", "list", "--json", *store)
    acls = run_huddle("acls", "list", "--json", *store)
    for listed in (users, acls):
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count("\n") == 1, listed.stdout
    assert [u["name"] for u in json.loads(users.stdout)] == ["alice"]
    assert [(a["principal"], a["operation"]) for a in json.loads(acls.stdout)] == [
        ("User:alice", "READ")
    ]
