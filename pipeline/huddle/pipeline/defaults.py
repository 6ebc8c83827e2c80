"""Defaults of the pipeline, importable without PySpark (the CLI parser needs them)."""

from __future__ import annotations

DEFAULT_GAP_MS = 100.0  # ticks of one member on one partition further apart are a gap
DEFAULT_MASTER = "local[*]"
