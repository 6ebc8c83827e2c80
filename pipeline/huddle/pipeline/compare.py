"""One table comparing runs (e.g. eager vs cooperative vs deferred vs static)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huddle.pipeline import html, plots
from huddle.pipeline.report import markdown_table
from huddle.pipeline.summary import RunSummary

COMPARISON_COLUMNS = (
    "run",
    "protocol",
    "client",
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


# the same columns, as a person reads them
COLUMN_LABELS = (
    "run",
    "protocol",
    "members",
    "scenario",
    "unavailable partition-s",
    "longest outage s",
    "rebalances",
    "in rebalances s",
    "records processed",
    "duplicates",
    "lost",
    "violations",
)


def comparison_rows(summaries: list[RunSummary]) -> list[list[Any]]:
    return [[getattr(s, c) for c in COMPARISON_COLUMNS] for s in summaries]


def write_comparison(
    summaries: list[RunSummary],
    out_dir: Path,
    run_dirs: Sequence[Path] = (),
    notes: Sequence[str] = (),
) -> str:
    """``comparison.md``, ``comparison.json``, ``unavailability_by_protocol.png`` and
    ``comparison.html`` (the plot inline: one file to open). ``notes``: lines said under
    the table (e.g. a run that was left out, and why)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(list(COMPARISON_COLUMNS), comparison_rows(summaries))
    rows = [dict(zip(COMPARISON_COLUMNS, r, strict=True)) for r in comparison_rows(summaries)]
    (out_dir / "comparison.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    plot = out_dir / "unavailability_by_protocol.png"
    names = [_name(s) for s in summaries]
    if len(set(names)) < len(names):  # runs of one protocol: told apart by their run
        names = [f"{n} ({s.run})" for n, s in zip(names, summaries, strict=True)]
    plots.comparison(
        names,
        [
            (
                "unavailability",
                "partition-seconds unavailable",
                [_figure(s.total_unavailable_partition_seconds) for s in summaries],
            ),
            (
                "longest outage",
                "seconds",
                [_figure(s.max_outage_seconds) for s in summaries],
            ),
            (
                "time in rebalances",
                "seconds",
                [_figure(s.rebalance_total_seconds) for s in summaries],
            ),
        ],
        "protocols compared (lower is better)",
        plot,
    )
    text = (
        "# Comparison\n\n"
        + table
        + "\n\n"
        + "".join(f"Note: {n}.\n\n" for n in notes)
        + "![unavailability per protocol](unavailability_by_protocol.png)\n"
    )
    (out_dir / "comparison.md").write_text(text, encoding="utf-8")
    page = html.page(
        "huddle: protocols compared",
        [
            html.heading("Protocols compared", 1),
            html.paragraph(
                "One chaos scenario per protocol; lower is better for every figure.", "lead"
            ),
            html.image(plot, "unavailability, longest outage and rebalance time per protocol"),
            html.table(list(COLUMN_LABELS), comparison_rows(summaries)),
            *[html.paragraph(f"Note: {n}.") for n in notes],
            *(
                [
                    html.links(
                        "Each run's own report:",
                        [
                            (s.run, os.path.relpath(d / "report" / "report.html", out_dir))
                            for s, d in zip(summaries, run_dirs, strict=True)
                        ],
                    )
                ]
                if len(run_dirs) == len(summaries)
                else []
            ),
        ],
    )
    (out_dir / "comparison.html").write_text(page, encoding="utf-8")
    return table


def _name(s: RunSummary) -> str:
    """A run in the plot: its protocol, and its client when the members were Kafka's."""
    name = s.protocol or s.run
    return name if s.client in (None, "huddle") else f"{name} ({s.client})"


def _figure(value: float | None) -> float | None:
    return None if value is None else float(value)
