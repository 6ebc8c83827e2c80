"""A chaos member run by a real Kafka client: its event file (``EventSink``), its settings,
the generation read from librdkafka, and what a Kafka-client run refuses."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from huddle.chaos import clients
from huddle.chaos.eventfiles import problems, read_events
from huddle.chaos.events import EventLog
from huddle.chaos.harness import RunSettings
from huddle.chaos.kafka_member import EventSink, driver_options, main
from huddle.chaos.kafka_workers.confluent_driver import CGMD_MAGIC, generation
from huddle.chaos.scenarios import ScenarioError, Shape, built_in
from huddle.chaos.worker import WorkerSettings
from huddle.protocol.errors import InvalidArgumentError

SHAPE = Shape(duration=10.0, members=3)


def _sink(tmp_path: Path) -> tuple[EventSink, EventLog]:
    log = EventLog(tmp_path / "member-1.jsonl", "member-1")
    return EventSink("kafka-python", log), log


def test_sink_writes_the_worker_events_stamped_with_the_member_it_was_told(
    tmp_path: Path,
) -> None:
    sink, log = _sink(tmp_path)
    sink.joined("m-1", 3)
    sink.assigned([("t", 1), ("t", 0)])
    sink.read("t", 0, 10, 25)
    sink.committed([("t", 0, 25)])
    sink.commit_failed("CommitFailedError()", [("t", 1, 7)])
    sink.revoked([("t", 1)])
    sink.lost([("t", 0)])
    log.close()
    records = read_events(tmp_path / "member-1.jsonl")
    assert problems(records, "member-1") == []  # every line a valid chaos event
    assert [r["event"] for r in records] == [
        "joined",
        "assigned",
        "processed",
        "committed",
        "committed",
        "revoked",
        "lost",
    ]
    assert {(r["member_id"], r["generation"]) for r in records} == {("m-1", 3)}
    assert records[1]["partitions"] == [["t", 0], ["t", 1]]
    assert (records[2]["offset"], records[2]["count"]) == (10, 15)  # offsets 10..24
    assert (records[3]["offset"], records[3]["accepted"], records[3]["error"]) == (25, True, None)
    refused = records[4]
    assert (refused["partition"], refused["offset"], refused["accepted"]) == (1, 7, False)
    assert refused["error"] == "CommitFailedError()"
    assert sink.owned == set()


def test_sink_writes_no_generation_it_was_not_told(tmp_path: Path) -> None:
    """Between generations a client says -1 (kafka-python) or nothing (librdkafka before
    its metadata has one): no ``joined`` line, but a member id it tells is kept for the
    events that follow; the same generation again is not a new line."""
    sink, log = _sink(tmp_path)
    sink.joined("m-1", None)
    sink.assigned([("t", 0)])
    sink.joined(None, -1)
    sink.joined("m-1", 4)
    sink.joined("m-1", 4)
    log.close()
    records = read_events(tmp_path / "member-1.jsonl")
    assert [(r["event"], r["member_id"], r["generation"]) for r in records] == [
        ("assigned", "m-1", -1),
        ("joined", "m-1", 4),
    ]


class _Consumer:
    def __init__(self, raw: object) -> None:
        self.raw = raw

    def consumer_group_metadata(self) -> object:
        return self.raw


def test_confluent_generation_is_read_from_librdkafkas_group_metadata() -> None:
    def raw(gen: int) -> bytes:
        return CGMD_MAGIC + gen.to_bytes(4, sys.byteorder, signed=True) + b"g\x00m-1\x00\x01"

    assert generation(_Consumer(raw(7))) == 7  # type: ignore[arg-type]
    assert generation(_Consumer(raw(-1))) is None  # type: ignore[arg-type]  # between
    assert generation(_Consumer(b"CGMDv3:\x00\x00\x00\x07")) is None  # type: ignore[arg-type]
    assert generation(_Consumer(CGMD_MAGIC + b"\x07")) is None  # type: ignore[arg-type]


def test_a_real_confluent_consumer_without_a_group_yet_has_no_generation() -> None:
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Consumer

    consumer = Consumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:9"})
    try:
        assert generation(consumer) is None
    finally:
        consumer.close()


def _worker() -> WorkerSettings:
    return WorkerSettings(bootstrap="127.0.0.1:9092", name="member-1", run_dir="r")


def test_worker_settings_become_the_drivers_options() -> None:
    settings = WorkerSettings(
        bootstrap="127.0.0.1:9092",
        name="member-2",
        run_dir="r",
        client="confluent-kafka",
        protocol="range",
        instance_id="member-2",
        session_timeout_ms=3000,
        heartbeat_interval_ms=500,
    )
    options = driver_options(settings)
    assert (options.strategy, options.instance_id, options.client_id) == (
        "range",
        "member-2",
        "member-2",
    )
    assert (options.session_ms, options.heartbeat_ms, options.commit) == (3000, 500, True)


@pytest.mark.parametrize(
    ("client", "protocol", "why"),
    [
        ("aiokafka", "cooperative-sticky", "no protocol 'cooperative-sticky'"),
        ("kafka-python", "cooperative-deferred", "no protocol 'cooperative-deferred'"),
        ("kcat", "range", "this worker runs one of"),
        ("huddle", "range", "this worker runs one of"),
    ],
)
def test_settings_a_client_cannot_run_are_refused(client: str, protocol: str, why: str) -> None:
    settings = WorkerSettings(
        bootstrap="127.0.0.1:9092", name="m", run_dir="r", client=client, protocol=protocol
    )
    with pytest.raises(InvalidArgumentError, match=why):
        driver_options(settings)


def test_the_process_refuses_bad_settings_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(['{"bootstrap": "x", "name": "m", "run_dir": "r", "client": "aiokafka", '
                 '"protocol": "sticky"}']) == 2  # fmt: skip
    assert "no protocol 'sticky'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "scenario", "why"),
    [
        ({"client": "kafkajs"}, "process-death", "unknown client 'kafkajs'"),
        ({"protocol": "cooperative-sticky"}, "process-death", "no protocol"),
        ({"stateful": True}, "process-death", "--stateful"),
        ({"bootstrap": "127.0.0.1:9"}, "process-death", "--bootstrap"),
    ],
)
def test_a_kafka_client_run_refuses_what_it_cannot_do(
    tmp_path: Path, change: dict[str, object], scenario: str, why: str
) -> None:
    pytest.importorskip("aiokafka")
    settings = RunSettings(run_dir=tmp_path, client="aiokafka", protocol="range")
    settings = dataclasses.replace(settings, **change)  # type: ignore[arg-type]
    s = built_in(scenario, SHAPE)
    with pytest.raises(ScenarioError, match=why):
        clients.check(settings, s)


def test_a_kafka_client_run_may_be_a_cluster_scenario(tmp_path: Path) -> None:
    """Every node of the cluster then has a Kafka listener (docs/kafka.md, "In a cluster")."""
    pytest.importorskip("aiokafka")
    settings = RunSettings(run_dir=tmp_path, client="aiokafka", protocol="range")
    for scenario in ("coordinator-failover", "etcd-faults"):
        clients.check(settings, built_in(scenario, SHAPE))


def test_huddle_members_are_not_checked_against_a_kafka_client(tmp_path: Path) -> None:
    settings = RunSettings(run_dir=tmp_path, protocol="cooperative-deferred")
    clients.check(settings, built_in("coordinator-failover", SHAPE))
    assert clients.member_argv(settings, _worker())[2] == "huddle.chaos.worker"
    kafka = dataclasses.replace(settings, client="kafka-python")
    assert clients.member_argv(kafka, _worker())[2] == "huddle.chaos.kafka_member"
