"""A run's report directory: Parquet tables, ``summary.json``, ``report.md`` and PNGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huddle.pipeline import plots
from huddle.pipeline.analysis import RunAnalysis, write_tables
from huddle.pipeline.summary import RunSummary, summarise, write_summary

REPORT_DIR = "report"


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _t(value: float | None, t0: float) -> float | None:
    return None if value is None else value - t0


def render_markdown(a: RunAnalysis, s: RunSummary, t0: float) -> str:
    out = [
        f"# Run `{a.run}`",
        "",
        f"Protocol **{a.protocol}**, scenario **{a.scenario}**, tick gap {a.gap_ms:g} ms. "
        f"Times are seconds since the run's first event. Availability window: "
        f"{s.window.definition} ({s.window.seconds} s).",
        "",
        "## Figures",
        "",
        markdown_table(
            ["figure", "value"],
            [
                ["total unavailable partition-seconds", s.total_unavailable_partition_seconds],
                ["max outage (s)", s.max_outage_seconds],
                ["rebalances", s.rebalance_count],
                ["rebalance time total (s)", s.rebalance_total_seconds],
                ["records processed", s.records_processed],
                ["duplicates", s.duplicates],
                ["duplicates below commit", s.duplicates_below_commit],
                ["lost", s.lost],
                *[[f"violations: {k}", v] for k, v in s.violations.items()],
            ],
        ),
        "",
        "![ownership timeline](ownership.png)",
        "",
        "![unavailability per partition](unavailability.png)",
        "",
        "## Unavailability per partition",
        "",
        markdown_table(
            ["partition", "unavailable s", "outages", "max outage s"],
            [
                [
                    f"{r['topic']}-{r['partition']}",
                    r["unavailable_seconds"],
                    r["outages"],
                    r["max_outage_seconds"],
                ]
                for r in a.unavailability
            ],
        ),
        "",
        "## Rebalances",
        "",
        markdown_table(
            ["generation", "started", "stored", "duration s", "triggers", "reason", "members"],
            [
                [
                    r["generation"],
                    _t(r["started"], t0),
                    _t(r["stored"], t0),
                    r["duration"],
                    r["triggers"],
                    r["reason"],
                    r["members"],
                ]
                for r in a.rebalances
            ],
        ),
        "",
        "## Safety violations",
        "",
    ]
    if not a.violations:
        out.append("None.")
    else:
        out.append(
            markdown_table(
                ["type", "partition", "at", "proc", "records", "evidence"],
                [
                    [
                        v["type"],
                        f"{v['topic']}-{v['partition']}",
                        _t(v["ts"], t0),
                        v["proc"],
                        v["records"],
                        f"`{v['evidence']}`",
                    ]
                    for v in a.violations
                ],
            )
        )
    return "\n".join(out) + "\n"


def write_report(a: RunAnalysis, out_dir: Path | None = None) -> RunSummary:
    """Write everything for one run under ``RUN_DIR/report`` (or ``out_dir``)."""
    out = out_dir if out_dir is not None else a.run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    write_tables(a, out)
    summary = summarise(a)
    write_summary(summary, out / "summary.json")
    t0 = a.first_ts
    plots.ownership_timeline(
        a.ownership, a.outages, t0, out / "ownership.png", f"{a.run}: partition ownership"
    )
    plots.bars(
        [f"{r['topic']}-{r['partition']}" for r in a.unavailability],
        [float(r["unavailable_seconds"]) for r in a.unavailability],
        "unavailable seconds",
        f"{a.run}: unavailability per partition",
        out / "unavailability.png",
    )
    (out / "report.md").write_text(render_markdown(a, summary, t0), encoding="utf-8")
    return summary
