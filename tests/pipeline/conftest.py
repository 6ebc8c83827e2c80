"""Every analysis persists its tables (``analysis._keep``) for its report; a session-wide
SparkSession would keep them all, test after test, until its aggregations run out of
memory. Each test leaves the cache empty, as ``huddle report`` and ``huddle demo`` do
after each run's report."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _spark_cache_emptied() -> Iterator[None]:
    yield
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.catalog.clearCache()
