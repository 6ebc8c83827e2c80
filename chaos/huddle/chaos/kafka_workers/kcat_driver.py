"""The kcat driver: runs Debian's ``kcat -G`` (librdkafka) as a balanced consumer and turns
what it prints into the drivers' JSON lines: ``python -m
huddle.chaos.kafka_workers.kcat_driver --bootstrap HOST:PORT --group G --topic T [...]``.

kcat reports each rebalance on stderr (``% Group G rebalanced (memberid M): assigned: t [0],
t [1]``, or ``... rebalanced: incremental assignment of 2 partition(s) (memberid M, COOPERATIVE
rebalance protocol): t [0], t [1]``), and prints ``topic partition offset`` per record on
stdout (``-f``). It commits with librdkafka's auto-commit every second (``--no-commit`` turns
that off) and does not say when: no ``committed`` lines. ``joined`` carries the member id only.
SIGTERM is passed on to kcat, which closes its consumer (leaving the group).
Strategies: range, roundrobin, cooperative-sticky; static membership; TLS and SASL
(``--tls-ca``, ``--sasl-*``: handed to kcat in a settings file, ``-F``, that only this user
can read, removed when kcat exits).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Final

from huddle.chaos.kafka_workers.emit import Partition, Reporter, StopFlag
from huddle.chaos.kafka_workers.options import (
    COOPERATIVE_STICKY,
    RANGE,
    ROUNDROBIN,
    DriverOptions,
    parse,
)

CLIENT = "kcat"
STRATEGIES = (RANGE, ROUNDROBIN, COOPERATIVE_STICKY)
CLOSE_S: Final = 15.0  # kcat's own close (a commit, LeaveGroup) before it is killed

_EAGER = re.compile(
    r"^% Group \S+ rebalanced \(memberid (?P<member>[^)]*)\): (?P<kind>assigned|revoked): "
    r"(?P<list>.*)$"
)
_INCREMENTAL = re.compile(
    r"^% Group \S+ rebalanced: incremental (?P<kind>assignment|revoke) of \d+ partition\(s\) "
    r"\(memberid (?P<member>[^,]*)(?P<lost>, assignment lost)?, \S+ rebalance protocol\): "
    r"(?P<list>.*)$"
)
_PARTITION = re.compile(r"(\S+) \[(\d+)\]")
_RECORD = re.compile(r"^(?P<topic>\S+) (?P<partition>\d+) (?P<offset>\d+)$")


@dataclass(frozen=True, slots=True)
class Rebalance:
    """One rebalance line of kcat's: ``kind`` is assigned, revoked or lost."""

    kind: str
    member_id: str
    partitions: list[Partition]


def parse_rebalance(line: str) -> Rebalance | None:
    """The rebalance a kcat stderr line reports, or None for any other line."""
    line = line.rstrip("\n")
    match = _EAGER.match(line) or _INCREMENTAL.match(line)
    if match is None:
        return None
    kind = {"assigned": "assigned", "assignment": "assigned"}.get(match["kind"], "revoked")
    if match.groupdict().get("lost"):
        kind = "lost"
    partitions = [(t, int(p)) for t, p in _PARTITION.findall(match["list"])]
    return Rebalance(kind=kind, member_id=match["member"], partitions=partitions)


def parse_record(line: str) -> tuple[str, int, int] | None:
    """``(topic, partition, offset)`` of a record line kcat printed with ``-f``."""
    match = _RECORD.match(line.strip())
    if match is None:
        return None
    return match["topic"], int(match["partition"]), int(match["offset"])


def security_conf(options: DriverOptions) -> dict[str, str]:
    """librdkafka's TLS and SASL settings for ``options`` (none for PLAINTEXT)."""
    conf: dict[str, str] = {}
    if options.security_protocol != "PLAINTEXT":
        conf["security.protocol"] = options.security_protocol
    if options.tls_ca is not None:
        conf["ssl.ca.location"] = options.tls_ca
    if options.sasl_mechanism is not None:
        conf["sasl.mechanism"] = options.sasl_mechanism
        conf["sasl.username"] = options.sasl_username or ""
        conf["sasl.password"] = options.sasl_password()
    return conf


def command(binary: str, options: DriverOptions, config_file: str | None = None) -> list[str]:
    """kcat's command line; ``config_file``: a file of more settings (``-F``: the TLS and
    SASL ones, which keeps the password off the command line)."""
    conf = {
        "client.id": options.client_id or CLIENT,
        "session.timeout.ms": options.session_ms,
        "heartbeat.interval.ms": options.heartbeat_ms,
        "max.poll.interval.ms": max(options.rebalance_ms, options.session_ms),
        "partition.assignment.strategy": options.strategy,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "true" if options.commit else "false",
        "auto.commit.interval.ms": 1000,
    }
    if options.instance_id is not None:
        conf["group.instance.id"] = options.instance_id
    argv = [binary, "-b", options.bootstrap, "-G", options.group, "-u", "-f", r"%t %p %o\n"]
    if config_file is not None:
        argv += ["-F", config_file]
    for key, value in conf.items():
        argv += ["-X", f"{key}={value}"]
    return [*argv, options.topic]


def _read_stderr(stream: IO[str], report: Reporter) -> None:
    for line in stream:
        event = parse_rebalance(line)
        if event is not None:
            if event.kind == "assigned":
                report.joined(event.member_id or None, None)
                report.assigned(event.partitions)
            elif event.kind == "lost":
                report.lost(event.partitions)
            else:
                report.revoked(event.partitions)
        elif line.startswith("% ERROR"):
            report.error(line[2:].strip())


def _read_stdout(stream: IO[str], report: Reporter) -> None:
    for line in stream:
        record = parse_record(line)
        if record is not None:
            report.consumed(*record)


def run(options: DriverOptions, report: Reporter, binary: str) -> int:
    secure = security_conf(options)
    if not secure:
        return _run(options, report, binary, None)
    # only this user may read it (mkstemp's mode); removed when kcat is done
    with tempfile.NamedTemporaryFile("w", prefix="kcat-", suffix=".conf") as conf:
        conf.write("".join(f"{key}={value}\n" for key, value in secure.items()))
        conf.flush()
        return _run(options, report, binary, conf.name)


def _run(options: DriverOptions, report: Reporter, binary: str, config_file: str | None) -> int:
    stop = StopFlag(options.max_seconds)
    report.started(strategy=options.strategy, instance_id=options.instance_id)
    child = subprocess.Popen(
        command(binary, options, config_file),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stderr is not None
    readers = [
        threading.Thread(target=_read_stderr, args=(child.stderr, report), daemon=True),
        threading.Thread(target=_read_stdout, args=(child.stdout, report), daemon=True),
    ]
    for reader in readers:
        reader.start()
    while not stop.stopped and child.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.2)
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=CLOSE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=CLOSE_S)
    for reader in readers:
        reader.join(timeout=CLOSE_S)
    if child.returncode not in (0, -signal.SIGTERM):
        report.error(f"kcat exited with status {child.returncode}")
        return 1
    report.left()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv, CLIENT, STRATEGIES, secure=True)
    binary = shutil.which("kcat")
    if binary is None:
        print("kcat is not installed (apt-get install kcat)", file=sys.stderr)
        return 2
    return run(options, Reporter(CLIENT), binary)


if __name__ == "__main__":
    sys.exit(main())
