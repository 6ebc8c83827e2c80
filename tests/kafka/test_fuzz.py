"""The Kafka-wire fuzzer in CI: a bounded number of fuzzed Kafka frames against a real
Kafka listener (issue 26), as ``tests/chaos/test_fuzz.py`` does for huddle's wire.

``huddle.chaos.kafka_fuzzrun`` checks every connection against what the bytes sent call
for (``kafka_oracle``) and keeps a consumer heartbeating on the Kafka wire in its own
group; the listener runs in-process, so its log is checked too: no error, no traceback.
``python -m bench.fuzz --wire kafka`` runs a million.
"""

from __future__ import annotations

import pytest
from structlog.typing import EventDict

from huddle.chaos.kafka_fuzzrun import fuzz_kafka
from tests.helpers import error_events, wait_until
from tests.kafka.conftest import Listening

FRAMES = 3_000


@pytest.mark.parametrize("seed", [1, 2])
async def test_fuzzed_kafka_frames_are_answered_as_kafka_says(
    kafka: Listening, logs: list[EventDict], seed: int
) -> None:
    report = await fuzz_kafka(kafka.port, frames=FRAMES, seed=seed)
    assert report.violations == [], f"seed {seed}: {report.violations[:5]}"
    assert error_events(logs) == []
    assert report.frames == FRAMES
    assert report.replies > FRAMES // 3, "most fuzzed requests are answered, not cut off"
    kinds = set(report.failure_kinds)
    assert {"closed:not-served", "error:unknown_member_id", "error:invalid_request"} <= kinds
    assert len([k for k in kinds if k.startswith("closed:unreadable:")]) >= 10, kinds
    assert report.heartbeats >= 1
    assert report.heartbeat_max_ms < 2_000, "the bystander was held up"
    await wait_until(lambda: kafka.server.connection_count == 0, what="every connection closed")
