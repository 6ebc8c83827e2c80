"""What one chaos run is asked to do (``RunSettings``) and how it ended (``RunResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from huddle.chaos.protocols import ProtocolOptions

HUDDLE_CLIENT = "huddle"  # the members are huddle's own Member (huddle.chaos.worker)


@dataclass(frozen=True, slots=True)
class RunSettings:
    run_dir: Path
    protocol: str = "cooperative-sticky"
    options: ProtocolOptions = field(default_factory=ProtocolOptions)
    members: int = 3
    partitions: int = 6
    duration: float = 30.0
    rate: float = 50.0
    seed: int = 0
    stateful: bool = False
    restore_rate: float = 1_000.0
    state_records: int | None = None  # stateful: a partition's state is its last N records
    bootstrap: str | None = None  # a running coordinator; None: start one
    # a Kafka-client run on a running coordinator: its Kafka listener (HOST:PORT)
    kafka_bootstrap: str | None = None
    group: str = "chaos"
    topic: str = "chaos"
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 500
    rebalance_timeout_ms: int = 10_000
    commit_interval_ms: int = 1_000
    disconnect_grace_ms: int = 1_000
    # members connect through the fault proxy: None means only when the scenario injects
    # network faults (the extra hop is not what other scenarios measure)
    proxy: bool | None = None
    # who the members are: huddle's Member, or a real Kafka client on the Kafka listener
    # (huddle.chaos.clients.KAFKA_CLIENTS)
    client: str = HUDDLE_CLIENT


@dataclass(slots=True)
class RunResult:
    run_dir: Path
    outcome: str  # completed, interrupted, deadline, failed
    pids: list[int] = field(default_factory=list)  # every process started
    faults: int = 0

    @property
    def exit_code(self) -> int:
        return {"completed": 0, "interrupted": 130}.get(self.outcome, 1)
