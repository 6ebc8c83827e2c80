"""How to start each client's driver: its command line, its environment, what it supports,
and why it cannot run here when it cannot (a package or program missing).

kafkajs runs under node with ``NODE_PATH`` naming a ``node_modules`` that holds the pinned
kafkajs: ``$HUDDLE_KAFKAJS_NODE_MODULES`` if set, else the repository's
``tests/kafka_clients/js/node_modules`` (``make kafkajs`` installs it there).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from huddle.chaos.kafka_workers.options import (
    CONSUMER_PROTOCOL,
    COOPERATIVE_STICKY,
    RANGE,
    ROUNDROBIN,
    DriverOptions,
)

HERE: Final = Path(__file__).resolve().parent
KAFKAJS_DRIVER: Final = HERE / "kafkajs_driver.js"
NODE_MODULES_ENV: Final = "HUDDLE_KAFKAJS_NODE_MODULES"


@dataclass(frozen=True, slots=True)
class Client:
    name: str
    strategies: tuple[str, ...]  # the first is its eager default
    static: bool  # has static membership (group.instance.id)
    module: str | None = None  # the Python driver's module; None: not a Python driver
    package: str | None = None  # the import the Python driver needs

    @property
    def eager(self) -> str:
        return self.strategies[0]

    @property
    def cooperative(self) -> bool:
        return COOPERATIVE_STICKY in self.strategies


_PKG: Final = "huddle.chaos.kafka_workers"
CLIENTS: Final[Mapping[str, Client]] = {
    c.name: c
    for c in (
        Client(
            "kafka-python",
            (RANGE, ROUNDROBIN, COOPERATIVE_STICKY),
            True,
            f"{_PKG}.kafka_python_driver",
            "kafka",
        ),
        Client("aiokafka", (RANGE, ROUNDROBIN), True, f"{_PKG}.aiokafka_driver", "aiokafka"),
        Client(
            "confluent-kafka",
            (RANGE, ROUNDROBIN, COOPERATIVE_STICKY, CONSUMER_PROTOCOL),
            True,
            f"{_PKG}.confluent_driver",
            "confluent_kafka",
        ),
        Client("kcat", (RANGE, ROUNDROBIN, COOPERATIVE_STICKY), True, f"{_PKG}.kcat_driver"),
        Client("kafkajs", (ROUNDROBIN,), False),
    )
}
PYTHON_CLIENTS: Final = ("kafka-python", "aiokafka", "confluent-kafka")


def kafkajs_node_modules() -> Path | None:
    """The ``node_modules`` holding kafkajs, or None if there is none."""
    named = os.environ.get(NODE_MODULES_ENV)
    candidates = [Path(named)] if named else []
    candidates += [p / "tests" / "kafka_clients" / "js" / "node_modules" for p in HERE.parents]
    for candidate in candidates:
        if (candidate / "kafkajs" / "package.json").is_file():
            return candidate
    return None


def missing(name: str) -> str | None:
    """Why the driver of client ``name`` cannot run here, or None if it can."""
    client = CLIENTS[name]
    if client.package is not None and importlib.util.find_spec(client.package) is None:
        return f"the Python package for {name} is not installed (pip install -e '.[kafka]')"
    if name == "kcat" and shutil.which("kcat") is None:
        return "kcat is not installed (apt-get install kcat)"
    if name == "kafkajs":
        if shutil.which("node") is None:
            return "node is not installed (apt-get install nodejs npm)"
        if kafkajs_node_modules() is None:
            return "kafkajs is not installed (make kafkajs)"
    return None


def command(name: str, options: DriverOptions) -> list[str]:
    """The command line that runs client ``name``'s driver with ``options``."""
    client = CLIENTS[name]
    if client.module is not None:
        return [sys.executable, "-m", client.module, *options.to_argv()]
    node = shutil.which("node") or "node"
    return [node, str(KAFKAJS_DRIVER), *options.to_argv()]


def environment(name: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for client ``name``'s driver (``base``: this process's by default)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    if name == "kafkajs":
        modules = kafkajs_node_modules()
        if modules is not None:
            env["NODE_PATH"] = str(modules)
    return env
