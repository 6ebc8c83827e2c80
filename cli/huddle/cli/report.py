"""``huddle report RUN_DIR...``: the PySpark pipeline over chaos runs' event logs.

PySpark and matplotlib come with the ``pipeline`` extra; without them the command says so in
one line and exits 2 instead of failing with a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Mapping

from huddle.pipeline.cli import add_arguments

__all__ = ["add_arguments", "missing_extra", "run"]

PIPELINE_MODULES = ("pyspark", "matplotlib")


def missing_extra(command: str) -> str | None:
    """The line to print when the pipeline's dependencies are not installed, else None."""
    missing = [name for name in PIPELINE_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (
        f"huddle: {command} needs {' and '.join(missing)}, not installed here: "
        "pip install 'huddle[pipeline]'"
    )


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    problem = missing_extra("huddle report")
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from huddle.pipeline.cli import run_report

    return run_report(args)
