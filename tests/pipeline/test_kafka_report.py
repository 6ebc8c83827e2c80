"""The report and its safety checks over a chaos run whose members were real Kafka consumers:
the same pipeline, unchanged, and the report says which client ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from huddle.pipeline.analysis import analyse
from huddle.pipeline.compare import write_comparison
from huddle.pipeline.report import write_report
from huddle.pipeline.summary import read_summary
from tests.chaos.test_kafka_chaos import require
from tests.pipeline.test_pipeline import NO_VIOLATIONS, spark

__all__ = ["spark"]  # the fixture
pytestmark = [pytest.mark.spark, pytest.mark.e2e]

DURATION_S = 10.0


def test_a_rolling_bounce_of_kafka_python_consumers_is_safe_and_reported(
    spark: SparkSession, tmp_path: Path
) -> None:
    """kafka-python consumers, cooperative-sticky, each SIGTERMed and started again in turn:
    no record lost, none processed by two members at once or by one that did not own it, no
    commit backwards; the report and the comparison name the client."""
    require("kafka-python")
    from huddle.chaos.harness import RunSettings
    from huddle.chaos.harness import run as run_chaos
    from huddle.chaos.scenarios import BUILT_IN, Shape

    run_dir = tmp_path / "kafka-python"
    settings = RunSettings(
        run_dir=run_dir, client="kafka-python", protocol="cooperative-sticky", duration=DURATION_S
    )
    result = run_chaos(settings, BUILT_IN["rolling-bounce"](Shape(DURATION_S, 3)))
    assert result.outcome == "completed"

    summary = write_report(analyse(spark, run_dir, gap_ms=100.0))
    assert summary.violations == NO_VIOLATIONS, summary.violations
    assert summary.lost == 0
    assert summary.records_processed > 0
    assert summary.partitions == 6  # every partition was processed in the window
    assert (summary.client, summary.protocol, summary.scenario) == (
        "kafka-python",
        "cooperative-sticky",
        "rolling-bounce",
    )
    assert read_summary(run_dir / "report" / "summary.json").client == "kafka-python"
    assert "members **kafka-python**" in (run_dir / "report" / "report.md").read_text()

    out = tmp_path / "comparison"
    write_comparison([summary], out, [run_dir], ["a note"])
    rows = json.loads((out / "comparison.json").read_text())
    assert rows[0]["client"] == "kafka-python"
    assert "Note: a note." in (out / "comparison.md").read_text()
    assert "Note: a note." in (out / "comparison.html").read_text()


def test_a_rolling_bounce_under_the_consumer_protocol_is_safe_and_reported(
    spark: SparkSession, tmp_path: Path
) -> None:
    """confluent-kafka consumers with ``group.protocol=consumer`` (KIP-848: member epochs,
    no group-wide generation): the same safety checks find nothing, every partition is
    owned again after each bounce, and the report names the protocol."""
    require("confluent-kafka")
    from huddle.chaos.harness import RunSettings
    from huddle.chaos.harness import run as run_chaos
    from huddle.chaos.scenarios import BUILT_IN, Shape

    run_dir = tmp_path / "consumer"
    settings = RunSettings(
        run_dir=run_dir, client="confluent-kafka", protocol="consumer", duration=DURATION_S
    )
    result = run_chaos(settings, BUILT_IN["rolling-bounce"](Shape(DURATION_S, 3)))
    assert result.outcome == "completed"

    summary = write_report(analyse(spark, run_dir, gap_ms=100.0))
    assert summary.violations == NO_VIOLATIONS, summary.violations
    assert summary.lost == 0
    assert summary.partitions == 6
    assert (summary.client, summary.protocol) == ("confluent-kafka", "consumer")
    assert summary.partitions_moved is not None
    assert summary.partitions_moved > 0  # each bounced member came back with a new member id
    assert (
        "Protocol **consumer**, members **confluent-kafka**"
        in (run_dir / "report" / "report.md").read_text()
    )
