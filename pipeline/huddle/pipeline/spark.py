"""Building the one SparkSession the pipeline's jobs share.

Quiet by default: no console progress bars (``[Stage 47:====>  (3 + 2) / 8]``) and no
log4j lines under ERROR, from the JVM's start on (a log4j2 configuration given to the
driver JVM, not only ``setLogLevel`` after it started). ``verbose`` brings Spark's own
output back; huddle prints its own progress.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from huddle.pipeline.defaults import DEFAULT_MASTER

_QUIET_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
# the level Spark gives a Python driver's console: the same, so it says nothing about it
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def quiet_log4j2() -> Path:
    """A log4j2 configuration with only errors, written once per process."""
    path = Path(tempfile.gettempdir()) / "huddle-log4j2-quiet.properties"
    if not path.is_file() or path.read_text() != _QUIET_LOG4J2:
        path.write_text(_QUIET_LOG4J2)
    return path


def build_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "huddle-report",
    shuffle_partitions: int = 8,
    driver_memory: str | None = None,
    verbose: bool = False,
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
        .config("spark.ui.showConsoleProgress", "true" if verbose else "false")
    )
    if not verbose:
        option = f"-Dlog4j2.configurationFile=file:{quiet_log4j2()}"
        builder = builder.config("spark.driver.extraJavaOptions", option)
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session
