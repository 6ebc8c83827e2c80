"""compose.yaml: every node's environment, read as ``huddle serve`` reads it in the image,
is a valid configuration whose listeners are the ports the file publishes and advertises."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from huddle.cli import parse_args
from huddle.cli.serve import serve_settings
from huddle.coordinator.config import ServerConfig

yaml = pytest.importorskip("yaml", reason="pyyaml (a dev dependency) reads compose.yaml")

ROOT = Path(__file__).resolve().parents[2]
_DEFAULTED = re.compile(r"\$\{[A-Z0-9_]+:-([^}]*)\}")


def image_environment() -> dict[str, str]:
    """The HUDDLE_* variables the Dockerfile's ENV lines set."""
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^\s+(HUDDLE_[A-Z_]+)=(\S+)", text, re.MULTILINE))


def nodes() -> dict[str, dict[str, Any]]:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services: dict[str, dict[str, Any]] = compose["services"]
    return {name: spec for name, spec in services.items() if name.startswith("huddle-")}


def node_config(spec: dict[str, Any]) -> ServerConfig:
    env = image_environment()
    for key, value in spec["environment"].items():
        env[key] = _DEFAULTED.sub(lambda m: m.group(1), str(value))  # the file's defaults
    return serve_settings(parse_args(["serve"]), env).config


def test_compose_runs_three_nodes_of_one_cluster() -> None:
    found = nodes()
    assert sorted(found) == ["huddle-a", "huddle-b", "huddle-c"]
    configs = [node_config(spec) for spec in found.values()]
    assert {c.cluster for c in configs} == {"etcd://etcd:2379"}
    assert len({c.node_id for c in configs}) == 3


@pytest.mark.parametrize("name", ["huddle-a", "huddle-b", "huddle-c"])
def test_each_node_publishes_and_advertises_both_of_its_listeners(name: str) -> None:
    """A client on the host reaches every listener at the address the node advertises:
    huddle's own wire and the Kafka wire."""
    spec = nodes()[name]
    config = node_config(spec)
    published = set(spec["ports"])
    assert config.kafka_port, f"{name} has no Kafka listener"
    for port, advertised in (
        (config.port, config.advertise),
        (config.kafka_port, config.kafka_advertise),
    ):
        assert f"127.0.0.1:{port}:{port}" in published, (name, port, published)
        assert advertised == f"127.0.0.1:{port}", (name, advertised)
