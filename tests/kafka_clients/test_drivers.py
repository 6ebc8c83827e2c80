"""The drivers' own parts, without a broker: their options, their lines, kcat's output
parsed, how each is launched, and ``Drivers`` waiting on lines with a deadline."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from huddle.chaos.kafka_workers import kcat_driver, launch
from huddle.chaos.kafka_workers.emit import Reporter
from huddle.chaos.kafka_workers.kcat_driver import Rebalance, parse_rebalance, parse_record
from huddle.chaos.kafka_workers.options import STRATEGIES, DriverOptions, parse
from huddle.chaos.kafka_workers.running import Drivers, DriverTimeoutError, partitions_of


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_options_come_back_from_their_flags() -> None:
    options = DriverOptions(
        bootstrap="127.0.0.1:9092",
        group="g",
        topic="t",
        strategy="cooperative-sticky",
        session_ms=10_000,
        heartbeat_ms=500,
        instance_id="i-1",
        commit=False,
        client_id="c",
        max_seconds=12.5,
    )
    assert parse(options.to_argv(), "x", STRATEGIES) == options


def test_tls_and_sasl_options_come_back_from_their_flags(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("correct horse\nignored\n")
    options = DriverOptions(
        bootstrap="127.0.0.1:9092",
        group="g",
        topic="t",
        tls_ca="/ca.pem",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password_file=str(password),
    )
    assert parse(options.to_argv(), "x", STRATEGIES, secure=True) == options
    assert options.security_protocol == "SASL_SSL"
    assert options.sasl_password() == "correct horse"
    conf = kcat_driver.security_conf(options)
    assert conf == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "correct horse",
    }
    argv = kcat_driver.command("kcat", options, "/tmp/k.conf")
    assert argv[argv.index("-F") + 1] == "/tmp/k.conf"
    assert "correct horse" not in " ".join(argv)  # the password stays off the command line


_SASL = ["--sasl-mechanism", "PLAIN", "--sasl-username", "a", "--sasl-password-file", "p"]


@pytest.mark.parametrize(
    ("argv", "kw", "message"),
    [
        (["--heartbeat-ms", "6000"], {}, "--heartbeat-ms must be below --session-ms"),
        (["--instance-id", "a"], {"static": False}, "has no static membership"),
        (["--strategy", "sticky"], {}, "invalid choice"),
        (["--session-ms", "0"], {}, "must be positive"),
        (["--tls-ca", "ca.pem"], {}, "the x driver takes no TLS or SASL options"),
        (_SASL, {}, "the x driver takes no TLS or SASL options"),
        (_SASL[:4], {"secure": True}, "SASL needs --sasl-mechanism, --sasl-username and --sasl"),
        (["--sasl-mechanism", "GSSAPI"], {"secure": True}, "invalid choice"),
    ],
)
def test_bad_options_are_refused_with_one_line(
    argv: list[str], kw: dict[str, bool], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--bootstrap", "h:1", "--group", "g", "--topic", "t"]
    with pytest.raises(SystemExit) as exit_info:
        parse(base + argv, "x", STRATEGIES, **kw)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_reporter_says_what_changed_and_what_is_owned() -> None:
    out = io.StringIO()
    r = Reporter("test", out)
    r.joined("m-1", 1)
    r.joined("m-1", 1)  # the same generation again: no second line
    r.assigned([("t", 1), ("t", 0)])
    r.consumed("t", 0, 7)
    r.consumed("t", 0, 8)  # only where it resumed
    r.revoked([("t", 0)])
    r.assigned([("t", 0)])
    r.consumed("t", 0, 9)  # assigned again: where it resumed this time
    r.committed([("t", 0, 10)])
    r.left()
    got = lines(out)
    assert [e["event"] for e in got] == [
        "joined",
        "assigned",
        "consumed",
        "revoked",
        "assigned",
        "consumed",
        "committed",
        "left",
    ]
    assert got[1]["owned"] == [["t", 0], ["t", 1]]
    assert got[3]["partitions"] == [["t", 0]]
    assert got[3]["owned"] == [["t", 1]]
    assert [e["offset"] for e in got if e["event"] == "consumed"] == [7, 9]
    assert got[6]["offsets"] == [["t", 0, 10]]
    assert all(isinstance(e["mono"], float) and e["client"] == "test" for e in got)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "% Group g rebalanced (memberid rdkafka-1): assigned: t [0], t [3]\n",
            Rebalance("assigned", "rdkafka-1", [("t", 0), ("t", 3)]),
        ),
        (
            "% Group g rebalanced (memberid rdkafka-1): revoked: my.topic [2]\n",
            Rebalance("revoked", "rdkafka-1", [("my.topic", 2)]),
        ),
        (
            "% Group g rebalanced: incremental assignment of 1 partition(s) (memberid m, "
            "COOPERATIVE rebalance protocol): t [5]\n",
            Rebalance("assigned", "m", [("t", 5)]),
        ),
        (
            "% Group g rebalanced: incremental revoke of 2 partition(s) (memberid m, "
            "COOPERATIVE rebalance protocol): t [1], t [4]\n",
            Rebalance("revoked", "m", [("t", 1), ("t", 4)]),
        ),
        (
            "% Group g rebalanced: incremental revoke of 1 partition(s) (memberid m, "
            "assignment lost, COOPERATIVE rebalance protocol): t [1]\n",
            Rebalance("lost", "m", [("t", 1)]),
        ),
        ("% Group g rebalanced (memberid m): assigned: \n", Rebalance("assigned", "m", [])),
        ("% Waiting for group rebalance\n", None),
        ("% ERROR: Local: Broker transport failure\n", None),
    ],
)
def test_kcat_rebalance_lines_are_read(line: str, expected: Rebalance | None) -> None:
    assert parse_rebalance(line) == expected


def test_kcat_record_lines_are_read() -> None:
    assert parse_record("orders 3 42\n") == ("orders", 3, 42)
    assert parse_record("a value that is not a record line") is None


def test_each_client_has_a_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    options = DriverOptions(bootstrap="h:1", group="g", topic="t", strategy="roundrobin")
    for name, client in launch.CLIENTS.items():
        argv = launch.command(name, options)
        if client.module is not None:
            assert argv[:3] == [sys.executable, "-m", client.module]
        else:
            assert argv[1] == str(launch.KAFKAJS_DRIVER)
        assert argv[-len(options.to_argv()) :] == options.to_argv()
    modules = tmp_path / "node_modules"
    (modules / "kafkajs").mkdir(parents=True)
    (modules / "kafkajs" / "package.json").write_text("{}")
    monkeypatch.setenv(launch.NODE_MODULES_ENV, str(modules))
    assert launch.environment("kafkajs")["NODE_PATH"] == str(modules)


def test_a_missing_program_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert launch.missing("kcat") == "kcat is not installed (apt-get install kcat)"
    assert "node is not installed" in str(launch.missing("kafkajs"))


@pytest.mark.skipif(launch.missing("kafkajs") is not None, reason="node or kafkajs missing")
def test_the_kafkajs_driver_refuses_static_membership() -> None:
    options = DriverOptions(
        bootstrap="127.0.0.1:1", group="g", topic="t", strategy="roundrobin", instance_id="i"
    )
    done = subprocess.run(
        launch.command("kafkajs", options),
        env=launch.environment("kafkajs"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "no static membership" in done.stderr


FAKE = """
import json, signal, time
for owned in ({owned}):
    print(json.dumps({{"event": "assigned", "mono": time.monotonic(), "owned": owned}}),
          flush=True)
signal.pause()  # until the Drivers stop it (SIGTERM); it dies with its parent too
"""


def _fake(monkeypatch: pytest.MonkeyPatch, owned: dict[str, str]) -> None:
    """``launch.command`` gives a script that prints ``owned[client_id]``'s lines, then waits."""

    def command(client: str, options: DriverOptions) -> list[str]:
        return [sys.executable, "-c", FAKE.format(owned=owned[options.client_id or ""])]

    monkeypatch.setattr(launch, "command", command)


def test_drivers_wait_until_the_group_owns_everything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake(monkeypatch, {"a": '[["t", 0]], [["t", 0], ["t", 1]],', "b": '[["t", 2]],'})
    with Drivers(tmp_path) as d:
        for name in ("a", "b"):
            d.start(name, "x", DriverOptions("h:1", "g", "t", client_id=name))
        at = d.wait(lambda: d.balanced(["a", "b"], partitions_of("t", 3)), 30, "balanced")
        assert at == max(d.all["a"].owned_since, d.all["b"].owned_since)
        d.all["a"].kill()
        assert d.all["a"].owned == frozenset()  # a killed driver owns nothing
        assert d.balanced(["a", "b"], partitions_of("t", 3)) is None
    assert all(driver.proc.poll() is not None for driver in d.all.values())


def test_a_wait_that_runs_out_names_each_drivers_last_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake(monkeypatch, {"a": '[["t", 0]],'})
    with Drivers(tmp_path) as d:
        a = d.start("a", "x", DriverOptions("h:1", "g", "t", client_id="a"))
        d.wait(lambda: a.events or None, 30, "a's first line")
        expected = r"balanced: not within 0.2 s; a \(x, running\)"
        with pytest.raises(DriverTimeoutError, match=expected):
            d.wait(lambda: d.balanced(["a"], partitions_of("t", 2)), 0.2, "balanced")
