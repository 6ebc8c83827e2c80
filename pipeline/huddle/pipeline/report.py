"""A run's report directory: Parquet tables, ``summary.json``, ``report.md``, PNGs, and
``report.html``: all of it in one self-contained page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huddle.pipeline import html, plots
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


UNAVAILABILITY_HEADER = [
    "partition",
    "unavailable s",
    "outages",
    "max outage s",
    "unowned s",
    "restoring s",
]


def unavailability_rows(a: RunAnalysis) -> list[list[Any]]:
    why = {(r["topic"], r["partition"]): r for r in a.stopped}
    rows = []
    for r in a.unavailability:
        stopped = why.get((r["topic"], r["partition"]))
        rows.append(
            [
                f"{r['topic']}-{r['partition']}",
                r["unavailable_seconds"],
                r["outages"],
                r["max_outage_seconds"],
                None if stopped is None else stopped["unowned_seconds"],
                None if stopped is None else stopped["restoring_seconds"],
            ]
        )
    return rows


MOVED_INTRO = (
    "Within the availability window. A member is its process: a partition moved when it "
    "went to another member than the one that had it last, returned when it went back to "
    "that one; both count handovers, and a partition may be handed over several times. "
    "Restores rebuild a task's state up to its committed offset before it processes; one "
    "cut short (its partition revoked or lost, or its member killed, before it finished) "
    "counts the records it replayed by then. Processing stopped while no member owned a "
    "partition (unowned) or while "
    "its owner restored its state (restoring); stopped counts both, each instant once, "
    "and unavailable is every moment nobody processed, for any reason."
)


def moved_rows(s: RunSummary) -> list[list[Any]]:
    """The short "what moved" table: handovers, restores, and why processing stopped."""
    return [
        ["partitions moved to another member", s.partitions_moved],
        ["partitions returned to the member that had them", s.partitions_returned],
        ["state records restored (replayed)", s.records_restored],
        ["restores cut short, of those with state to rebuild", f"{s.restores_cut} of {s.restores}"],
        ["restore time, all partitions (s)", s.restore_seconds],
        ["unowned partition-seconds", s.unowned_partition_seconds],
        ["restoring partition-seconds", s.restoring_partition_seconds],
        ["stopped partition-seconds (unowned or restoring)", s.stopped_partition_seconds],
        ["unavailable partition-seconds (any reason)", s.total_unavailable_partition_seconds],
    ]


def rebalance_rows(a: RunAnalysis, t0: float) -> list[list[Any]]:
    return [
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
    ]


def violation_rows(a: RunAnalysis, t0: float, evidence: str = "{}") -> list[list[Any]]:
    return [
        [
            v["type"],
            f"{v['topic']}-{v['partition']}",
            _t(v["ts"], t0),
            v["proc"],
            v["records"],
            evidence.format(v["evidence"]),
        ]
        for v in a.violations
    ]


def render_markdown(a: RunAnalysis, s: RunSummary, t0: float) -> str:
    out = [
        f"# Run `{a.run}`",
        "",
        f"Protocol **{a.protocol}**, members **{a.client or 'huddle'}**, "
        f"scenario **{a.scenario}**, tick gap {a.gap_ms:g} ms. "
        f"Times are seconds since the run's first event. Availability window: "
        f"{s.window.definition} ({s.window.seconds} s).",
        "",
        "## Figures",
        "",
        markdown_table(["figure", "value"], figures(s)),
        "",
        "## What moved",
        "",
        MOVED_INTRO,
        "",
        markdown_table(["figure", "value"], moved_rows(s)),
        "",
        "![ownership timeline](ownership.png)",
        "",
        "![unavailability per partition](unavailability.png)",
        "",
        "## Unavailability per partition",
        "",
        markdown_table(UNAVAILABILITY_HEADER, unavailability_rows(a)),
        "",
        "## Rebalances",
        "",
        markdown_table(
            ["generation", "started", "stored", "duration s", "triggers", "reason", "members"],
            rebalance_rows(a, t0),
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
                violation_rows(a, t0, "`{}`"),
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
    (out / "report.html").write_text(render_html(a, summary, t0, out), encoding="utf-8")
    return summary


def figures(s: RunSummary) -> list[list[Any]]:
    return [
        ["total unavailable partition-seconds", s.total_unavailable_partition_seconds],
        ["max outage (s)", s.max_outage_seconds],
        ["rebalances", s.rebalance_count],
        ["rebalance time total (s)", s.rebalance_total_seconds],
        ["records processed", s.records_processed],
        ["duplicates", s.duplicates],
        ["duplicates below commit", s.duplicates_below_commit],
        ["lost", s.lost],
        *[[f"violations: {k}", v] for k, v in s.violations.items()],
    ]


def render_html(a: RunAnalysis, s: RunSummary, t0: float, out: Path) -> str:
    """``report.html``: the same as ``report.md``, with the plots inline, in one file."""
    verdict = (
        html.paragraph("No safety violations.", "good")
        if not a.violations
        else html.paragraph(f"{len(a.violations)} safety violations: see below.", "bad")
    )
    parts = [
        html.heading(f"Run {a.run}", 1),
        html.paragraph(
            f"Protocol {a.protocol}, members {a.client or 'huddle'}, scenario {a.scenario}, "
            f"tick gap {a.gap_ms:g} ms. Times are "
            f"seconds since the run's first event. Availability window: "
            f"{s.window.definition} ({s.window.seconds} s).",
            "lead",
        ),
        verdict,
        html.heading("Figures"),
        html.table(["figure", "value"], figures(s), "figures"),
        html.heading("What moved"),
        html.paragraph(MOVED_INTRO),
        html.table(["figure", "value"], moved_rows(s), "figures"),
        html.heading("Partition ownership"),
        html.image(out / "ownership.png", "ownership timeline"),
        html.heading("Unavailability per partition"),
        html.image(out / "unavailability.png", "unavailability per partition"),
        html.table(UNAVAILABILITY_HEADER, unavailability_rows(a)),
        html.heading("Rebalances"),
        html.table(
            ["generation", "started s", "stored s", "duration s", "triggers", "reason", "members"],
            rebalance_rows(a, t0),
        ),
        html.heading("Safety violations"),
    ]
    if a.violations:
        parts.append(
            html.table(
                ["type", "partition", "at s", "proc", "records", "evidence"],
                violation_rows(a, t0),
            )
        )
    else:
        parts.append(html.paragraph("None."))
    return html.page(f"huddle report: {a.run}", parts)
