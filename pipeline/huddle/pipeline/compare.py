"""One table comparing runs (e.g. eager vs cooperative vs deferred vs static)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huddle.pipeline import plots
from huddle.pipeline.report import markdown_table
from huddle.pipeline.summary import RunSummary

COMPARISON_COLUMNS = (
    "run",
    "protocol",
    "scenario",
    "total_unavailable_partition_seconds",
    "max_outage_seconds",
    "rebalance_count",
    "rebalance_total_seconds",
    "records_processed",
    "duplicates",
    "lost",
    "violations_total",
)


def comparison_rows(summaries: list[RunSummary]) -> list[list[Any]]:
    return [[getattr(s, c) for c in COMPARISON_COLUMNS] for s in summaries]


def write_comparison(summaries: list[RunSummary], out_dir: Path) -> str:
    """``comparison.md``, ``comparison.json`` and ``unavailability_by_protocol.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(list(COMPARISON_COLUMNS), comparison_rows(summaries))
    rows = [dict(zip(COMPARISON_COLUMNS, r, strict=True)) for r in comparison_rows(summaries)]
    (out_dir / "comparison.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    plots.bars(
        [f"{s.protocol} ({s.run})" for s in summaries],
        [float(s.total_unavailable_partition_seconds or 0.0) for s in summaries],
        "unavailable partition-seconds",
        "unavailability per protocol",
        out_dir / "unavailability_by_protocol.png",
    )
    text = (
        "# Comparison\n\n" + table + "\n\n![unavailability per protocol]"
        "(unavailability_by_protocol.png)\n"
    )
    (out_dir / "comparison.md").write_text(text, encoding="utf-8")
    return table
