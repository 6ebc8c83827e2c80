"""The ``huddle`` command: settings from flags and environment, errors, and a real run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path

import pytest
from huddle.testing import free_port

from huddle.cli import main, parse_args
from huddle.cli.admin import DEFAULT_BOOTSTRAP, bootstrap_of
from huddle.cli.serve import SERVE_FLAGS, serve_settings
from huddle.cli.usage import UsageError
from huddle.client.connection import connect
from huddle.coordinator.config import GroupConfig, ServerConfig
from huddle.protocol.messages import (
    CreateTopicsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    TopicSpec,
)

HUDDLE = Path(sys.executable).with_name("huddle")
CLI_TIMEOUT_S = 30.0


def settings_for(argv: Sequence[str], env: dict[str, str] | None = None) -> ServerConfig:
    return serve_settings(parse_args(["serve", *argv]), env or {}).config


# --- settings: pure -----------------------------------------------------------------------


def test_defaults() -> None:
    settings = serve_settings(parse_args(["serve"]), {})
    assert settings.config == ServerConfig()
    assert settings.log_format == "auto"
    assert settings.log_level == "info"


def test_flags() -> None:
    config = settings_for(
        [
            "--host=0.0.0.0",
            "--port=9393",
            "--min-session-timeout-ms=100",
            "--max-session-timeout-ms=200",
            "--initial-rebalance-delay-ms=0",
            "--max-group-size=5",
            "--max-frame-bytes=4096",
            "--disconnect-grace-ms=-1",
            "--no-notices",
            "--max-connections=7",
        ]
    )
    assert config.host == "0.0.0.0"
    assert config.port == 9393
    assert config.max_frame_bytes == 4096
    assert config.max_connections == 7
    assert config.group == GroupConfig(
        min_session_timeout_ms=100,
        max_session_timeout_ms=200,
        initial_rebalance_delay_ms=0,
        max_group_size=5,
        disconnect_grace_ms=-1,
        rebalance_notices=False,
    )


def test_environment() -> None:
    env = {
        "HUDDLE_PORT": "9494",
        "HUDDLE_HOST": "::",
        "HUDDLE_NOTICES": "false",
        "HUDDLE_MAX_GROUP_SIZE": " 3 ",
        "HUDDLE_LOG_FORMAT": "json",
        "HUDDLE_LOG_LEVEL": "debug",
    }
    settings = serve_settings(parse_args(["serve"]), env)
    assert settings.config.port == 9494
    assert settings.config.host == "::"
    assert settings.config.group.rebalance_notices is False
    assert settings.config.group.max_group_size == 3
    assert (settings.log_format, settings.log_level) == ("json", "debug")


def test_flags_win_over_environment() -> None:
    env = {"HUDDLE_PORT": "9494", "HUDDLE_NOTICES": "false"}
    config = settings_for(["--port", "9595", "--notices"], env)
    assert config.port == 9595
    assert config.group.rebalance_notices is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HUDDLE_PORT": "abc"}, "HUDDLE_PORT='abc' is not an integer"),
        (
            {"HUDDLE_NOTICES": "maybe"},
            "HUDDLE_NOTICES='maybe' is not a boolean (use true or false)",
        ),
        ({"HUDDLE_LOG_FORMAT": "xml"}, "HUDDLE_LOG_FORMAT='xml' is not one of auto, json, console"),
    ],
)
def test_bad_environment_values(env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        serve_settings(parse_args(["serve"]), env)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "70000"],
        ["--min-session-timeout-ms", "500", "--max-session-timeout-ms", "100"],
        ["--max-connections", "0"],
    ],
)
def test_invalid_configuration(argv: list[str]) -> None:
    with pytest.raises(UsageError, match=r"^invalid configuration: "):
        settings_for(argv)


def test_every_setting_has_a_flag() -> None:
    group = {f.name for f in fields(GroupConfig)}
    server = {f.name for f in fields(ServerConfig)} - {"group"}
    assert {s.field for s in SERVE_FLAGS if s.target == "group"} == group
    assert {s.field for s in SERVE_FLAGS if s.target == "server"} == server
    assert all(s.env == "HUDDLE_" + s.dest.upper() for s in SERVE_FLAGS)


def test_every_flag_is_in_the_readme_s_table() -> None:
    """The README's "Configuration of huddle serve" table has a row for every flag."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = [line.split("|")[1] for line in readme.splitlines() if line.startswith("| `--")]
    named = {flag for row in rows for flag in re.findall(r"`--([a-z0-9-]+)`", row)}
    assert {s.flag for s in SERVE_FLAGS} <= named


def test_bootstrap() -> None:
    args = parse_args(["topics", "list"])
    assert bootstrap_of(args, {}) == DEFAULT_BOOTSTRAP
    assert bootstrap_of(args, {"HUDDLE_BOOTSTRAP": "10.0.0.1:1"}) == "10.0.0.1:1"
    flagged = parse_args(["topics", "list", "--bootstrap", "[::1]:9"])
    assert bootstrap_of(flagged, {"HUDDLE_BOOTSTRAP": "10.0.0.1:1"}) == "[::1]:9"
    with pytest.raises(UsageError, match="not HOST:PORT"):
        bootstrap_of(parse_args(["ping", "--bootstrap", "nowhere"]), {})


# --- errors: one line, an exit code ---------------------------------------------------------


def test_bad_environment_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve"], {"HUDDLE_PORT": "abc"}) == 2
    captured = capsys.readouterr()
    assert captured.err == "huddle: HUDDLE_PORT='abc' is not an integer\n"
    assert captured.out == ""


def test_invalid_configuration_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--max-frame-bytes", "0"], {}) == 2
    err = capsys.readouterr().err
    assert err.startswith("huddle: invalid configuration: ")
    assert err.count("\n") == 1


def test_a_malformed_cluster_exits_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Said at once, as a usage mistake, not as a traceback once the server listens."""
    assert main(["serve", "--port", "0", "--cluster", "etcd://h1:2379,nowhere"], {}) == 2
    captured = capsys.readouterr()
    reason = "not an etcd endpoint (host:port): 'nowhere' in 'etcd://h1:2379,nowhere'"
    assert captured.err == f"huddle: invalid configuration: {reason}\n"
    assert captured.out == ""


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("256.1.1.1", "host '256.1.1.1' is not an IP address (Octet 256 (> 255) not permitted"),
        ("10.0.0", "host '10.0.0' is not an IP address (Expected 4 octets"),
        ("[::1]", "host '[::1]' is not an IP address (write an IPv6 host without brackets)"),
        ("::g", "host '::g' is not an IP address"),
        ("my host", "host 'my host' is not an IP address or a host name"),
    ],
)
def test_an_invalid_host_exits_2_in_one_line(
    host: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Said at once, as a usage mistake (exit 2), not found out when listening fails."""
    for argv, env in ((["serve", "--host", host], {}), (["serve"], {"HUDDLE_HOST": host})):
        assert main(argv, env) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith(f"huddle: invalid configuration: {reason}")
        assert captured.err.count("\n") == 1
        assert captured.out == ""


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "0.0.0.0", "", "::", "fe80::1%eth0", "localhost", "node-1.example."]
)
def test_a_host_that_is_an_address_or_a_name_is_taken(host: str) -> None:
    assert settings_for(["--host", host]).host == host


@pytest.mark.parametrize("command", [["ping"], ["topics", "list"], ["groups", "describe", "g"]])
def test_unreachable_bootstrap_exits_1(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    assert main([*command, "--bootstrap", f"127.0.0.1:{port}"], {}) == 1
    captured = capsys.readouterr()
    assert captured.err == f"huddle: cannot connect to 127.0.0.1:{port}: connection refused\n"
    assert captured.out == ""


# --- admin commands in-process (each runs its own event loop, so in a thread) ---------------


async def test_admin_commands(bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def huddle(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(main, [*argv, "--bootstrap", bootstrap], {})
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    assert await huddle("ping") == (0, f"ok huddle protocol v2 at {bootstrap}\n", "")
    assert await huddle("topics", "create", "orders", "--partitions", "3") == (
        0,
        'created topic "orders" with 3 partitions\n',
        "",
    )
    assert await huddle("topics", "create", "audit-log", "--partitions", "12") == (
        0,
        'created topic "audit-log" with 12 partitions\n',
        "",
    )
    code, out, _ = await huddle("topics", "list")
    assert code == 0
    assert out == "TOPIC      PARTITIONS\naudit-log  12\norders     3\n"
    code, out, _ = await huddle("topics", "list", "--json")
    assert json.loads(out) == [
        {"name": "audit-log", "partitions": 12},
        {"name": "orders", "partitions": 3},
    ]
    code, out, err = await huddle("topics", "create", "orders", "--partitions", "3")
    assert code == 1
    assert out == ""
    assert err.startswith("huddle: ")
    assert err.endswith("(TOPIC_ALREADY_EXISTS)\n")
    assert err.count("\n") == 1
    assert await huddle("topics", "alter", "orders", "--partitions", "4") == (
        0,
        'topic "orders" now has 4 partitions\n',
        "",
    )
    assert await huddle("topics", "delete", "audit-log") == (0, 'deleted topic "audit-log"\n', "")
    assert (await huddle("groups", "list")) == (0, "no groups\n", "")
    assert json.loads((await huddle("groups", "list", "--json"))[1]) == []
    code, _, err = await huddle("groups", "describe", "nope")
    assert code == 1
    assert err.endswith("(GROUP_ID_NOT_FOUND)\n")
    code, out, _ = await huddle("cluster", "status")
    assert code == 0
    assert out.startswith("a single coordinator (no cluster)\n")
    assert bootstrap in out
    status = json.loads((await huddle("cluster", "status", "--json"))[1])
    assert status["shard_count"] == 0
    assert [n["address"] for n in status["nodes"]] == [bootstrap]


async def test_names_from_clients_are_shown_escaped(
    bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group id with ESC and RLO characters must not drive the operator's terminal."""
    hostile = "g\x1b[31m\u202etxt.exe"
    async with connect(bootstrap) as conn:
        await conn.request(CreateTopicsRequest(topics=[TopicSpec(name="t", partitions=1)]))
        offset = OffsetCommitPartition(partition=0, offset=1)
        await conn.request(  # an Empty group that only stores offsets
            OffsetCommitRequest(
                group_id=hostile, topics=[OffsetCommitTopic(name="t", partitions=[offset])]
            ),
            timeout=10,
        )
        for argv in (["groups", "list"], ["groups", "describe", hostile]):
            code = await asyncio.to_thread(main, [*argv, "--bootstrap", bootstrap], {})
            out, err = capsys.readouterr()
            assert code == 0, err
            assert "\x1b" not in out
            assert "\u202e" not in out
            assert "g\\x1b[31m\\u202etxt.exe" in out


# --- huddle serve as a process --------------------------------------------------------------


def huddle_argv(*argv: str) -> list[str]:
    if HUDDLE.exists():
        return [str(HUDDLE), *argv]
    return [sys.executable, "-m", "huddle", *argv]


def run_huddle(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        huddle_argv(*argv),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env={**os.environ, **(env or {})},
        check=False,
    )


def wait_accepting(port: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "huddle serve exited early"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"huddle serve did not accept on port {port} in {CLI_TIMEOUT_S} s")


@pytest.fixture
def serve_process() -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    process = subprocess.Popen(
        huddle_argv("serve", "--port", str(port), "--log-format", "json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HUDDLE_INITIAL_REBALANCE_DELAY_MS": "0"},
    )
    try:
        wait_accepting(port, process)
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=CLI_TIMEOUT_S)


@pytest.mark.e2e
def test_serve_end_to_end(serve_process: tuple[subprocess.Popen[str], int]) -> None:
    process, port = serve_process
    bootstrap = f"127.0.0.1:{port}"
    ping = run_huddle("ping", "--bootstrap", bootstrap)
    assert (ping.returncode, ping.stdout) == (0, f"ok huddle protocol v2 at {bootstrap}\n")
    created = run_huddle(
        "topics", "create", "orders", "--partitions", "3", "--bootstrap", bootstrap
    )
    assert created.returncode == 0, created.stderr
    listed = run_huddle("topics", "list", "--json", env={"HUDDLE_BOOTSTRAP": bootstrap})
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{"name": "orders", "partitions": 3}]

    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=CLI_TIMEOUT_S)
    assert process.returncode == 0, stderr
    events = [json.loads(line) for line in stderr.splitlines()]
    names = [e["event"] for e in events]
    assert "server_listening" in names
    assert names[-1] == "server_stopped"
    assert names.index("server_stopping") < names.index("server_stopped")
    listening = events[names.index("server_listening")]
    assert (listening["host"], listening["port"]) == ("127.0.0.1", port)
    assert all(e["level"] in ("debug", "info") for e in events), stderr


@pytest.mark.e2e
def test_serve_stops_on_sigint_too(serve_process: tuple[subprocess.Popen[str], int]) -> None:
    process, _ = serve_process
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=CLI_TIMEOUT_S)
    assert process.returncode == 0, stderr
    assert '"server_stopped"' in stderr.splitlines()[-1]


@pytest.mark.e2e
@pytest.mark.parametrize("closed", ["2>&-", ">&- 2>&-", "<&- >&- 2>&-"])
def test_serve_with_its_standard_streams_closed_serves_and_stops(closed: str) -> None:
    """``huddle serve 2>&-``: no log to write to is no reason to stop (the closed stream was
    taken by the event loop's epoll descriptor, and uvloop aborted on SIGTERM)."""
    port = free_port()
    command = shlex.join(huddle_argv("serve", "--port", str(port)))
    process = subprocess.Popen(
        ["sh", "-c", f"exec {command} {closed}"],
        text=True,
        env={**os.environ, "HUDDLE_INITIAL_REBALANCE_DELAY_MS": "0"},
    )
    try:
        wait_accepting(port, process)
        ping = run_huddle("ping", "--bootstrap", f"127.0.0.1:{port}")
        assert (ping.returncode, ping.stderr) == (0, "")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=CLI_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=CLI_TIMEOUT_S)


@pytest.mark.e2e
def test_serve_on_a_port_in_use_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_huddle("serve", "--port", str(port), "--log-format", "json")
    assert result.returncode == 1
    expected = f"huddle: cannot listen on 127.0.0.1:{port}: address already in use"
    assert expected in result.stderr.splitlines()


@pytest.mark.e2e
def test_serve_with_a_bad_environment_value_exits_2() -> None:
    result = run_huddle("serve", env={"HUDDLE_PORT": "nine"})
    assert result.returncode == 2
    assert result.stderr == "huddle: HUDDLE_PORT='nine' is not an integer\n"


@pytest.mark.e2e
def test_the_cli_does_not_load_pyspark() -> None:
    """`huddle serve` runs in the container image, which has no PySpark: only `huddle
    report` may load it."""
    code = "import sys, huddle.cli; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
