"""Building the one SparkSession the pipeline's jobs share.

Quiet by default: no console progress bars (``[Stage 47:====>  (3 + 2) / 8]``) and no
log4j lines under ERROR, from the JVM's start on (``log4j2-quiet.properties``, shipped with
huddle, given to the driver JVM, not only ``setLogLevel`` after it started). A user's own
Spark configuration wins: with ``SPARK_CONF_DIR`` set, or Java options for the driver
already in the environment, the log4j2 file is not imposed (the progress bars still go).
``verbose`` brings Spark's own output back; huddle prints its own progress.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from pyspark.sql import SparkSession

from huddle.pipeline.defaults import DEFAULT_MASTER


def quiet_log4j2() -> Path:
    """The log4j2 configuration with only errors, as installed with huddle."""
    return Path(str(resources.files("huddle.pipeline") / "log4j2-quiet.properties"))


def _own_spark_config() -> bool:
    """Whether the user configures Spark's logging or driver options themselves."""
    if os.environ.get("SPARK_CONF_DIR"):
        return True
    given = " ".join(os.environ.get(v, "") for v in ("PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS"))
    return "log4j" in given or "extraJavaOptions" in given


# Event logs of a few MB (the demo's runs): planning a query adaptively and compiling it
# to Java cost more than they save there, and one shuffle partition per stage is plenty.
SMALL_DATA = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
}


def build_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "huddle-report",
    shuffle_partitions: int = 8,
    driver_memory: str | None = None,
    verbose: bool = False,
    small_data: bool = False,
) -> SparkSession:
    """A session on ``master`` (local mode by default, any cluster URL otherwise).

    Timestamps are UTC so ISO-8601 times from the coordinator parse the same everywhere;
    the UI is off (nobody looks at it during a report). ``small_data``: ``SMALL_DATA``'s
    settings (``shuffle_partitions`` is then 1).
    """
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if verbose else "false")
    )
    if not verbose and not _own_spark_config():
        option = f"-Dlog4j2.configurationFile=file:{quiet_log4j2()}"
        builder = builder.config("spark.driver.extraJavaOptions", option)
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    for key, value in (SMALL_DATA if small_data else {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session
