"""Shared bits of the benchmarks."""

from __future__ import annotations

import logging
import sys

import structlog


def quiet_logs() -> None:
    """Benchmarks print figures on stdout; the coordinator's events would drown them."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
