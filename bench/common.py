"""Shared bits of the benchmarks."""

from __future__ import annotations

import logging
import platform
import sys
from pathlib import Path

import structlog


def quiet_logs() -> None:
    """Benchmarks print figures on stdout; the coordinator's events would drown them."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def cpu_model() -> str:
    """The CPU's model name, printed with every figure (machines differ)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
