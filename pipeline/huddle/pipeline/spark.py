"""Building the one SparkSession the pipeline's jobs share."""

from __future__ import annotations

from pyspark.sql import SparkSession

from huddle.pipeline.defaults import DEFAULT_MASTER


def build_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "huddle-report",
    shuffle_partitions: int = 8,
    driver_memory: str | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """A session on ``master`` (local mode by default, any cluster URL otherwise).

    Timestamps are UTC so ISO-8601 times from the coordinator parse the same everywhere;
    the UI is off (nobody looks at it during a report).
    """
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "false")
    )
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
