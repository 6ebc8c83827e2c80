"""Matplotlib PNGs for the report (Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
from pyspark.sql import Row


def ownership_timeline(
    ownership: list[Row], outages: list[Row], t0: float, path: Path, title: str
) -> Path:
    """One lane per partition: a bar per ownership interval (colour per process), outages
    in red below."""
    lanes = sorted({(r["topic"], r["partition"]) for r in [*ownership, *outages]})
    procs = sorted({r["proc"] for r in ownership})
    colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(procs)}
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.45 * max(len(lanes), 1)))
    for y, lane in enumerate(lanes):
        for r in ownership:
            if (r["topic"], r["partition"]) == lane and r["end"] is not None:
                ax.broken_barh(
                    [(r["start"] - t0, r["end"] - r["start"])],
                    (y - 0.35, 0.5),
                    facecolors=colours[r["proc"]],
                )
        gaps = [
            (r["start"] - t0, r["duration"])
            for r in outages
            if (r["topic"], r["partition"]) == lane
        ]
        if gaps:
            ax.broken_barh(gaps, (y + 0.2, 0.15), facecolors="red")
    ax.set_yticks(range(len(lanes)), [f"{t}-{p}" for t, p in lanes])
    ax.set_xlabel("seconds since run start")
    ax.set_title(title)
    handles = [Rectangle((0, 0), 1, 1, color=colours[p]) for p in procs]
    handles.append(Rectangle((0, 0), 1, 1, color="red"))
    ax.legend(handles, [*procs, "unavailable"], loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def bars(labels: list[str], values: list[float], ylabel: str, title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(labels) + 2), 3.5))
    ax.bar(range(len(labels)), values, color="tab:blue")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
