"""One page comparing runs (e.g. eager vs cooperative vs deferred vs static, through a
rolling bounce, a scale-up and a process death): per situation, the trade-off chart
(partitions moved against partition-seconds stopped, a point per run) with one generated
sentence per protocol beside it (``huddle.pipeline.findings``), whether each design did
what it is for, and the table of every figure."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huddle.pipeline import findings, html, plots
from huddle.pipeline.report import markdown_table
from huddle.pipeline.summary import RunSummary

COMPARISON_COLUMNS = (
    "run",
    "protocol",
    "client",
    "scenario",
    "partitions_moved",
    "partitions_returned",
    "records_restored",
    "restores",
    "restores_cut",
    "restore_seconds",
    "unowned_partition_seconds",
    "restoring_partition_seconds",
    "stopped_partition_seconds",
    "total_unavailable_partition_seconds",
    "max_outage_seconds",
    "rebalance_count",
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
    "partitions moved",
    "moved back",
    "records restored",
    "restores",
    "cut short",
    "restoring s",
    "unowned partition-s",
    "restoring partition-s",
    "stopped partition-s",
    "unavailable partition-s",
    "longest outage s",
    "rebalances",
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
    intro: Sequence[str] = (),
) -> str:
    """``comparison.md``, ``comparison.json``, a ``tradeoff-N.png`` per situation and
    ``comparison.html`` (the plots inline: one file to open). ``intro``: lines said first
    (e.g. what restoring a partition costs); ``notes``: lines said under the table (e.g. a
    run that was left out, and why). Returns the table (Markdown)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown_table(list(COMPARISON_COLUMNS), comparison_rows(summaries))
    rows = [dict(zip(COMPARISON_COLUMNS, r, strict=True)) for r in comparison_rows(summaries)]
    (out_dir / "comparison.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    groups = findings.situations(summaries)
    names = list(dict.fromkeys(p.name for points in groups.values() for p in points))
    styles = {n: plots.member_style(i) for i, n in enumerate(names)}
    md = ["# Comparison\n", *[f"{line}\n" for line in intro]]
    parts = [
        html.heading("Protocols compared", 1),
        *[html.paragraph(line, "lead") for line in intro],
    ]
    missed: list[str] = []
    checked = ties = 0
    for i, (situation, points) in enumerate(groups.items(), start=1):
        drawn, missing = findings.tradeoff(points)
        plot = plots.tradeoff(situation, drawn, missing, styles, out_dir / f"tradeoff-{i}.png")
        said = [findings.sentence(p, points) for p in points]
        verdicts = findings.verdicts(points)
        missed += [v.text for v in verdicts if not v.held]
        checked += len(verdicts)
        ties += sum(v.tied for v in verdicts)
        judged = [v.text for v in verdicts]
        marked = [
            html.paragraph(v.text, "tied" if v.tied else "held" if v.held else "missed")
            for v in verdicts
        ]
        md += [f"## {situation}\n", f"![{situation}]({plot.name})\n"]
        md += [f"- {line}" for line in said] + [""] + [f"{line}\n" for line in judged]
        parts += [
            html.heading(situation),
            html.side_by_side(
                html.image(plot, f"{situation}: partitions moved against stopped time"),
                html.bullets(said) + "".join(marked),
            ),
        ]
    closing = _closing(missed, checked, ties)
    md += ["## Every figure\n", table, "", *[f"Note: {n}.\n" for n in notes], closing]
    (out_dir / "comparison.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    parts += [
        html.heading("Every figure"),
        html.table(list(COLUMN_LABELS), comparison_rows(summaries)),
        *[html.paragraph(f"Note: {n}.") for n in notes],
        html.paragraph(closing, "closing"),
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
    ]
    page = html.page("huddle: protocols compared", parts)
    (out_dir / "comparison.html").write_text(page, encoding="utf-8")
    return table


def _claims(count: int) -> str:
    return f"{count} design {'claim' if count == 1 else 'claims'}"


def _closing(missed: Sequence[str], checked: int, ties: int = 0) -> str:
    """The closing note: whether every design did what it is for here, from the verdicts
    (``ties`` of them held only as a tie: neither won)."""
    if not checked:
        return (
            "No protocol ran beside a rival in a situation its design claims to win, so no "
            "design claim was checked here."
        )
    tied = f" {_claims(ties)} ended in a tie, which shows neither way." if ties else ""
    if not missed:
        if ties == checked:
            return (
                f"Every check of a design claim here was a tie ({_claims(ties)}): these runs "
                "neither show nor refute them (each check is under its chart)."
            )
        won = (
            "Where a design claims to win and a rival ran beside it, it won in these runs "
            "(each check is under its chart)"
        )
        return won + (f", or tied.{tied}" if ties else ".")
    return (
        f"Findings: {_claims(len(missed))} did not hold in these runs (measured, above): "
        + " ".join(missed)
        + tied
    )
