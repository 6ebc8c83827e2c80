"""Matplotlib PNGs for the report (Agg backend: no display needed).

Colours are Okabe and Ito's colour-blind-safe palette; "unavailable" is black and hatched,
a colour no member is ever given. With more members than colours, later members repeat a
colour with a hatch: the first 42 all look different.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def tradeoff(
    title: str,
    drawn: Sequence[tuple[str, int, float]],
    missing: Sequence[str],
    styles: Mapping[str, tuple[str, str]],
    path: Path,
) -> Path:
    """One situation's runs as points: partitions that changed owner (x) against
    partition-seconds processing stopped (y), each labelled with its protocol, in the
    colour ``styles`` gives it (the same in every situation). A run without both figures
    is named under the plot as "n/a", not drawn at 0 where it would look best."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    top = max([s for _, _, s in drawn], default=1.0)
    right = max([m for _, m, _ in drawn], default=1)
    placed: list[tuple[float, float]] = []
    for name, moved, stopped in drawn:
        colour, _ = styles[name]
        ax.scatter([moved], [stopped], s=90, color=colour, edgecolors="#333333", zorder=3)
        # a label near one already placed goes under it: runs at one spot stay readable
        near = sum(
            1
            for x, y in placed
            if abs(x - moved) <= 0.08 * right and abs(y - stopped) <= 0.08 * top
        )
        placed.append((moved, stopped))
        ax.annotate(
            f"{name}\n{moved:,} moved, {stopped:,.1f} p-s",
            (moved, stopped),
            textcoords="offset points",
            xytext=(7, 5 - 24 * near),
            fontsize="small",
        )
    ax.set_xlim(left=0, right=right * 1.45 + 1)
    ax.set_ylim(bottom=0, top=top * 1.3 + 0.5)
    ax.set_xlabel("partitions that changed owner")
    ax.set_ylabel("partition-seconds processing stopped\n(unowned or restoring, each instant once)")
    ax.set_title(f"{title}\n(nearer the lower left is better)", fontsize="medium")
    ax.grid(True, color="#e3e3e3", zorder=0)
    if missing:
        ax.text(
            0.0, -0.28, "n/a (not measured): " + ", ".join(missing),
            transform=ax.transAxes, fontsize="small",
        )  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
