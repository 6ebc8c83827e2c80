"""Group -> shard placement: Kafka's partitionFor over the group id."""

from __future__ import annotations

import pytest

from huddle.coordinator.cluster.shards import java_string_hash, shard_of


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # printed by Java 17's "...".hashCode()
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("my-group", -1906497762),
        ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE
        ("h\u00e9llo", 103094734),
        ("\U0001f600", 1772899),  # a surrogate pair: two UTF-16 code units
        ("connect-cluster", 1440343063),
    ],
)
def test_the_hash_is_javas_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_a_group_lands_where_kafka_puts_its_offsets_partition() -> None:
    # Utils.abs(hashCode) % 50, Kafka's default offsets.topic.num.partitions, as Java prints it
    assert shard_of("hello", 50) == 22
    assert shard_of("my-group", 50) == 12  # the absolute value, not the sign bit cleared (36)
    assert shard_of("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) == 0
    assert shard_of("connect-cluster", 50) == 13
    assert all(0 <= shard_of(f"g{i}", 7) < 7 for i in range(1_000))


def test_groups_spread_over_the_shards() -> None:
    counts = [0] * 16
    for i in range(16_000):
        counts[shard_of(f"group-{i}", 16)] += 1
    assert min(counts) > 800
    assert max(counts) < 1_200


def test_a_shard_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("g", 0)
