"""Matplotlib PNGs for the report (Agg backend: no display needed).

Colours are Okabe and Ito's colour-blind-safe palette; "unavailable" is black and hatched,
a colour no member is ever given. With more members than colours, later members repeat a
colour with a hatch: the first 42 all look different.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch
from pyspark.sql import Row

# Okabe & Ito (2008), without black: black is "unavailable"
MEMBER_COLOURS = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
HATCHES = ("", "//", "..", "xx", "\\\\", "--")
UNAVAILABLE = "#000000"
UNAVAILABLE_HATCH = "////"
MAX_HEIGHT_IN = 300.0  # inches: 30,000 pixels at the 100 dpi the plots are saved at


def member_style(index: int) -> tuple[str, str]:
    """The colour and hatch of the ``index``-th member (never those of "unavailable")."""
    colour = MEMBER_COLOURS[index % len(MEMBER_COLOURS)]
    hatch = HATCHES[(index // len(MEMBER_COLOURS)) % len(HATCHES)]
    return colour, hatch


def ownership_timeline(
    ownership: list[Row], outages: list[Row], t0: float, path: Path, title: str
) -> Path:
    """One lane per partition: a bar per ownership interval (a style per process), outages
    black and hatched below."""
    lanes = sorted({(r["topic"], r["partition"]) for r in [*ownership, *outages]})
    procs = sorted({r["proc"] for r in ownership})
    styles = {p: member_style(i) for i, p in enumerate(procs)}
    # tall enough to read a lane each, within what an image may be (2^16 pixels a side)
    fig, ax = plt.subplots(figsize=(11, min(1.4 + 0.45 * max(len(lanes), 1), MAX_HEIGHT_IN)))
    for y, lane in enumerate(lanes):
        for r in ownership:
            if (r["topic"], r["partition"]) == lane and r["end"] is not None:
                colour, hatch = styles[r["proc"]]
                ax.broken_barh(
                    [(r["start"] - t0, r["end"] - r["start"])],
                    (y - 0.35, 0.5),
                    facecolors=colour,
                    hatch=hatch,
                    edgecolor="white" if not hatch else "#333333",
                    linewidth=0.3,
                )
        gaps = [
            (r["start"] - t0, r["duration"])
            for r in outages
            if (r["topic"], r["partition"]) == lane
        ]
        if gaps:
            ax.broken_barh(
                gaps,
                (y + 0.2, 0.15),
                facecolors=UNAVAILABLE,
                hatch=UNAVAILABLE_HATCH,
                edgecolor="white",
                linewidth=0.0,
            )
    ax.set_yticks(range(len(lanes)), [f"{t}-{p}" for t, p in lanes], fontsize="small")
    ax.set_xlabel("time since the run's first event (s)")
    ax.set_ylabel("partition")
    ax.set_title(title)
    handles = [
        Patch(facecolor=styles[p][0], hatch=styles[p][1], edgecolor="#333333", label=p)
        for p in procs
    ]
    handles.append(
        Patch(
            facecolor=UNAVAILABLE, hatch=UNAVAILABLE_HATCH, edgecolor="white", label="unavailable"
        )
    )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def bars(labels: list[str], values: list[float], ylabel: str, title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(labels) + 2.5), 3.8))
    ax.bar(range(len(labels)), values, color=MEMBER_COLOURS[4])
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def comparison(
    protocols: Sequence[str],
    panels: Sequence[tuple[str, str, Sequence[float | None]]],
    title: str,
    path: Path,
) -> Path:
    """Runs side by side (named by protocol), one panel per figure (its title and unit on
    the y axis), each bar labelled with its value; a figure a run has none of (no
    measurement window) is "n/a", not a bar of 0 that would look best."""
    width = max(4.2, 1.1 * len(protocols) + 1.6)
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 4.4), squeeze=False)
    styles = [member_style(i) for i in range(len(protocols))]
    for ax, (name, unit, values) in zip(axes[0], panels, strict=True):
        positions = list(range(len(protocols)))
        heights = [0.0 if v is None else v for v in values]
        drawn = ax.bar(
            positions,
            heights,
            color=[c for c, _ in styles],
            hatch=None,
            edgecolor="#333333",
            linewidth=0.5,
        )
        for bar, (_, hatch) in zip(drawn, styles, strict=True):
            bar.set_hatch(hatch)
        labels = ["n/a" if v is None else f"{v:,.3g}" for v in values]
        ax.bar_label(drawn, labels=labels, padding=2, fontsize="small")
        ax.set_xticks(positions, list(protocols), rotation=20, ha="right")
        ax.set_ylabel(unit)
        ax.set_title(name)
        ax.margins(y=0.15)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
