"""The APIs and versions the README and docs/kafka.md say the Kafka listener serves are
the ones it advertises (``huddle.coordinator.kafka.apis.SERVED``)."""

from __future__ import annotations

import re
from pathlib import Path

from huddle.coordinator.kafka.apis import SERVED

_ROOT = Path(__file__).resolve().parents[2]


def _served() -> dict[str, tuple[int, int]]:
    return {
        "".join(word.capitalize() for word in api.name.split("_")): span
        for api, span in SERVED.items()
    }


def test_the_readme_lists_every_api_served_with_its_versions() -> None:
    readme = (_ROOT / "README.md").read_text()
    start = readme.index("**Served** (versions):")
    listed = readme[start : readme.index("every\nversion the listed clients pick", start)]
    found = {
        name: (int(low), int(high))
        for name, low, high in re.findall(r"([A-Z][A-Za-z]+)\s+(\d+)-(\d+)", listed)
    }
    assert found == _served()


def test_docs_kafka_md_maps_every_api_served_with_its_versions() -> None:
    doc = (_ROOT / "docs" / "kafka.md").read_text()
    found: dict[str, tuple[int, int]] = {}
    for cell in re.findall(r"^\| ([A-Z][^|]*?) \|", doc, flags=re.MULTILINE):
        for name, low, high in re.findall(r"([A-Z][A-Za-z]+) \((\d+)-(\d+)\)", cell):
            found[name] = (int(low), int(high))
    assert found == _served()
