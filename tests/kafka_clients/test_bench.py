"""bench.kafka_clients' columns: which brokers a ``--broker`` list runs, and the table."""

from __future__ import annotations

import pytest

from bench.kafka_clients import Results, Target, table, targets


def test_a_broker_list_gives_a_column_each_with_its_flags() -> None:
    got = targets("tansu,huddle,huddle:--initial-rebalance-delay-ms=0", ["--x=1"])
    assert got == [
        Target("tansu", "tansu", ()),
        Target("huddle", "huddle", ("--x=1",)),
        Target(
            "huddle:--initial-rebalance-delay-ms=0",
            "huddle",
            ("--initial-rebalance-delay-ms=0", "--x=1"),
        ),
    ]


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("kafka", "unknown broker"),
        ("tansu:--x=1", "flags are for huddle"),
        ("huddle,huddle", "twice"),
    ],
)
def test_a_wrong_broker_list_is_refused(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        targets(spec, [])


def test_the_table_shows_each_broker_and_the_ratio_to_the_first() -> None:
    tansu, huddle = Results(), Results()
    tansu.figures["form"] = [3.0, 3.0, 3.2]
    huddle.figures["form"] = [6.0, None, 6.0]
    lines = table("kafka-python", {"tansu": tansu, "huddle": huddle})
    form = next(line for line in lines if "3 members form" in line)
    assert "3.00 s (3.00, 3.00, 3.20)" in form
    assert "6.00 s (6.00, fail, 6.00)" in form
    assert form.endswith("2.00x")
