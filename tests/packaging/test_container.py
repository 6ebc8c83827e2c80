"""The container image: builds, runs `huddle serve` as a non-root PID 1, serves a group, is
healthy, and stops cleanly on SIGTERM.

Needs rootful podman (with runc) and, the first time on a machine, debootstrap to make the
local Debian base image: see docs/containers.md. Without podman the tests skip, unless
HUDDLE_REQUIRE_CONTAINER=1 (as in CI), when they fail instead.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import pytest
from huddle.testing import free_port

from huddle.protocol.errors import ErrorCode
from huddle.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Protocol,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicSpec,
)
from tests.etcd import Etcd, etcd
from tests.packaging.containers import (
    BlockingClient,
    ContainerSetupError,
    Podman,
    build_image,
    container_running,
    ensure_base_image,
    find_podman,
    logs,
    wait_for_port,
)

pytestmark = [pytest.mark.container, pytest.mark.e2e]
__all__ = ["etcd"]  # the fixture

IMAGE = "localhost/huddle:test"
HOST = "127.0.0.1"
STOP_TIMEOUT_S = 10
# A server that handles SIGTERM itself stops in well under the grace period; one that ignores
# it (Python as PID 1 without a handler) is killed only when the 10 s run out.
MAX_STOP_S = 5.0


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("HUDDLE_REQUIRE_CONTAINER") == "1":
        pytest.fail(f"HUDDLE_REQUIRE_CONTAINER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    try:
        return find_podman(tmp_path_factory.mktemp("podman"))
    except ContainerSetupError as exc:
        _unavailable(str(exc))


@pytest.fixture(scope="module")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    workdir = tmp_path_factory.mktemp("image")
    start = time.monotonic()
    try:
        made = ensure_base_image(podman, workdir)
    except ContainerSetupError as exc:
        _unavailable(str(exc))
    if made:
        print(f"base image made in {time.monotonic() - start:.1f} s")
    start = time.monotonic()
    build_image(podman, workdir, IMAGE)
    print(f"{IMAGE} built in {time.monotonic() - start:.1f} s")
    return IMAGE


@dataclass(frozen=True)
class Container:
    name: str
    port: int


@pytest.fixture
def container(podman: Podman, image: str) -> Iterator[Container]:
    name = f"huddle-test-{uuid.uuid4().hex[:12]}"
    port = free_port()
    try:
        podman.run(
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            # The image's HEALTHCHECK probes ${HUDDLE_PORT:-9292}.
            "--env",
            f"HUDDLE_PORT={port}",
            image,
            "huddle",
            "serve",
            "--host",
            HOST,
            "--port",
            str(port),
            "--initial-rebalance-delay-ms",
            "0",
            timeout=120,
        )
        yield Container(name=name, port=port)
    finally:
        podman.run("rm", "--force", "--time", "0", name, timeout=60, check=False)


def test_image_config(podman: Podman, image: str) -> None:
    fmt = (
        "{{json .Config.User}} {{json .Config.Cmd}} {{json .Config.Entrypoint}} "
        "{{json .Config.StopSignal}} {{json .Config.Volumes}} {{json .HealthCheck.Test}}"
    )
    out = podman.run("image", "inspect", "--format", fmt, image, timeout=30).stdout
    user, cmd, entrypoint, stop_signal, volumes, health = out.split(" ", 5)
    assert "/var/lib/huddle" in volumes, "topics and offsets are kept in a volume"
    assert user == '"10001:10001"'
    assert cmd == '["huddle","serve"]'
    assert entrypoint in ("null", "[]")
    assert stop_signal == '"SIGTERM"'
    assert "huddle ping" in health


def test_container_serves_a_group_and_stops_on_sigterm(
    podman: Podman, container: Container
) -> None:
    name, port = container.name, container.port
    waited = wait_for_port(podman, name, HOST, port, timeout=60)
    print(f"listening after {waited:.2f} s")

    # A member joins through the container, KIP-394 style, and syncs its own assignment.
    group = "container-test"
    protocols = [Protocol(name="range", metadata=b"subscription")]
    with BlockingClient(HOST, port) as client:
        hello = client.handshake("container-test")
        assert hello.error_code == ErrorCode.NONE, hello

        first = client.call(
            JoinGroupRequest(
                group_id=group,
                member_id="",
                protocol_type="consumer",
                protocols=protocols,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
            )
        )
        assert isinstance(first, JoinGroupResponse), first
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        member_id = first.member_id
        assert member_id

        joined = client.call(
            JoinGroupRequest(
                group_id=group,
                member_id=member_id,
                protocol_type="consumer",
                protocols=protocols,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
            )
        )
        assert isinstance(joined, JoinGroupResponse), joined
        assert joined.error_code == ErrorCode.NONE, joined
        assert joined.generation_id == 1
        assert joined.member_id == member_id
        assert joined.leader == member_id
        assert joined.protocol_name == "range"
        assert [m.member_id for m in joined.members] == [member_id]

        assignment = b"topic-a:0,1,2"
        synced = client.call(
            SyncGroupRequest(
                group_id=group,
                generation_id=joined.generation_id,
                member_id=member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[SyncGroupAssignment(member_id=member_id, assignment=assignment)],
            )
        )
        assert isinstance(synced, SyncGroupResponse), synced
        assert synced.error_code == ErrorCode.NONE, synced
        assert synced.assignment == assignment
        _create_topic_and_commit(client, offset=17)

    uid = podman.run("exec", name, "id", "-u", timeout=30).stdout.strip()
    assert uid != "0", "the server runs as root in the container"

    health = podman.run("healthcheck", "run", name, timeout=30, check=False)
    assert health.returncode == 0, (
        f"healthcheck failed ({health.returncode}): {health.stdout}{health.stderr}\n"
        + logs(podman, name)
    )

    start = time.monotonic()
    podman.run("stop", "--time", str(STOP_TIMEOUT_S), name, timeout=STOP_TIMEOUT_S + 30)
    took = time.monotonic() - start
    print(f"stopped in {took:.2f} s")
    assert not container_running(podman, name)
    assert took < MAX_STOP_S, (
        f"podman stop took {took:.1f} s: SIGTERM was not handled by PID 1\n" + logs(podman, name)
    )
    code = podman.run("inspect", "--format", "{{.State.ExitCode}}", name, timeout=30)
    assert code.stdout.strip() == "0", (
        f"the server exited {code.stdout.strip()} on SIGTERM, not 0\n" + logs(podman, name)
    )

    # Started again, the same container still has the topic and the committed offset.
    podman.run("start", name, timeout=60)
    wait_for_port(podman, name, HOST, port, timeout=60)
    with BlockingClient(HOST, port) as client:
        assert client.handshake("container-test").error_code == ErrorCode.NONE
        fetched = client.call(OffsetFetchRequest(group_id=KEPT_GROUP))
        assert isinstance(fetched, OffsetFetchResponse), fetched
        offsets = {(t.name, p.partition): p.offset for t in fetched.topics for p in t.partitions}
        assert offsets == {("kept", 0): 17}, "the offset did not survive a restart\n" + logs(
            podman, name
        )


KEPT_GROUP = "kept-across-restarts"


def _create_topic_and_commit(client: BlockingClient, offset: int) -> None:
    created = client.call(CreateTopicsRequest(topics=[TopicSpec(name="kept", partitions=1)]))
    assert isinstance(created, CreateTopicsResponse), created
    assert created.topics[0].error_code == ErrorCode.NONE, created
    committed = client.call(
        OffsetCommitRequest(
            group_id=KEPT_GROUP,
            generation_id=-1,
            member_id="",
            topics=[
                OffsetCommitTopic(
                    name="kept", partitions=[OffsetCommitPartition(partition=0, offset=offset)]
                )
            ],
        )
    )
    assert isinstance(committed, OffsetCommitResponse), committed
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE, committed


def test_the_image_runs_a_cluster_node(podman: Podman, image: str, etcd: Etcd) -> None:
    """The image carries the etcd client: a node in a container joins a cluster on etcd
    (the environment as compose.yaml sets it) and coordinates groups."""
    name = f"huddle-node-{uuid.uuid4().hex[:12]}"
    port = free_port()
    try:
        podman.run(
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            "--env",
            f"HUDDLE_PORT={port}",
            "--env",
            f"HUDDLE_CLUSTER=etcd://{etcd.host}:{etcd.port}",
            "--env",
            "HUDDLE_DATA_DIR=",
            "--env",
            "HUDDLE_NODE_ID=container",
            image,
            "huddle",
            "serve",
            "--host",
            HOST,
            "--shards",
            "4",
            timeout=120,
        )
        wait_for_port(podman, name, HOST, port, timeout=60)
        deadline = time.monotonic() + 30
        with BlockingClient(HOST, port) as client:
            assert client.handshake("container-test").error_code == ErrorCode.NONE
            while True:
                found = client.call(FindCoordinatorRequest(group_id="g"))
                assert isinstance(found, FindCoordinatorResponse), found
                if found.error_code == ErrorCode.NONE:
                    break
                assert time.monotonic() < deadline, "the node took no shard\n" + logs(podman, name)
                time.sleep(0.2)
        assert (found.node_id, found.host, found.port) == ("container", HOST, port)
    finally:
        podman.run("rm", "--force", "--time", "0", name, timeout=60, check=False)


def test_the_image_serves_with_tls_users_and_acls(
    podman: Podman, image: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Certificates and a data dir with users mounted, security set by environment: the
    secured coordinator in a container authenticates, authorizes, and its health check
    (huddle ping, given the CA by environment) passes."""
    import anyio

    from huddle.client.admin import Admin
    from huddle.client.security import Security
    from huddle.protocol.errors import SaslAuthenticationFailedError
    from tests.security_setup import keep, make_pki

    root = tmp_path_factory.mktemp("secured")
    pki = make_pki(root)
    data = root / "data"
    anyio.run(keep, data, {"admin": "admin-pw", "app": "app-pw"})
    for path in (root, data, *data.iterdir(), *root.glob("*.pem")):
        os.chown(path, 10001, 10001)  # the image's user reads them
    name = f"huddle-secured-{uuid.uuid4().hex[:12]}"
    port = free_port()
    env = {
        "HUDDLE_PORT": str(port),
        "HUDDLE_TLS_CERT": "/certs/server.pem",
        "HUDDLE_TLS_KEY": "/certs/server.pem",
        "HUDDLE_SASL": "SCRAM-SHA-512",
        "HUDDLE_AUTHORIZER": "true",
        "HUDDLE_SUPER_USERS": "User:admin",
        "HUDDLE_CLIENT_TLS_CA": "/certs/ca.pem",  # for the health check's huddle ping
    }
    try:
        podman.run(
            "run",
            "--detach",
            "--name",
            name,
            "--network",
            "host",
            "--volume",
            f"{root}:/certs:ro",
            "--volume",
            f"{data}:/var/lib/huddle",
            *(arg for k, v in env.items() for arg in ("--env", f"{k}={v}")),
            image,
            "huddle",
            "serve",
            "--host",
            HOST,
            timeout=120,
        )
        wait_for_port(podman, name, HOST, port, timeout=60)
        bootstrap = f"{HOST}:{port}"

        async def as_users() -> tuple[dict[str, int], str]:
            admin = Security(ca_file=pki.ca, username="admin", password="admin-pw")
            async with Admin(bootstrap, security=admin) as client:
                await client.create_topic("orders", 3)
                topics = await client.list_topics()
            wrong = Security(ca_file=pki.ca, username="app", password="guess")
            try:
                async with Admin(bootstrap, security=wrong) as client:
                    await client.list_topics()
            except SaslAuthenticationFailedError as exc:
                return topics, exc.message
            raise AssertionError("a wrong password was accepted")

        topics, refused = anyio.run(as_users)
        assert topics == {"orders": 3}
        assert refused.startswith("authentication failed: invalid credentials")
        health = podman.run("exec", name, "huddle", "ping", "--bootstrap", bootstrap, timeout=60)
        assert "requires authentication" in health.stdout
        assert "authentication_failed" in logs(podman, name)
    finally:
        podman.run("rm", "--force", "--time", "0", name, timeout=60, check=False)
