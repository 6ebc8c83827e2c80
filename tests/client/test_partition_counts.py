"""The leader's kept partition counts: used between rebalances, never when they may be stale."""

from __future__ import annotations

from huddle.client.partition_counts import PartitionCounts

CONN, OTHER_CONN = object(), object()
SCOPE = (CONN, "m-1", 0)


def test_nothing_kept_until_fetched() -> None:
    assert PartitionCounts().get({"t"}, 0.0, SCOPE) is None


def test_kept_counts_are_used_on_the_same_connection_and_member() -> None:
    counts = PartitionCounts(max_age_s=60)
    counts.store({"t", "u"}, {"t": 6, "u": 2}, 0.0, SCOPE)
    assert counts.get({"t"}, 10.0, SCOPE) == {"t": 6}
    assert counts.get({"t", "u"}, 10.0, SCOPE) == {"t": 6, "u": 2}
    assert counts.get({"t"}, 10.0, (OTHER_CONN, "m-1", 0)) is None, "notices may be missed"
    assert counts.get({"t"}, 10.0, (CONN, "m-2", 0)) is None, "the member was fenced, rejoined"
    assert counts.get({"t"}, 10.0, (CONN, "m-1", 1)) is None, "a notice was dropped"
    assert counts.get({"t"}, 61.0, SCOPE) is None, "older than the max age"
    assert counts.get({"t", "v"}, 10.0, SCOPE) is None, "v was never asked for"


def test_notices_update_kept_counts_and_missing_topics_count_as_absent() -> None:
    counts = PartitionCounts()
    counts.store({"t", "later"}, {"t": 6}, 0.0, SCOPE)
    assert counts.get({"t", "later"}, 1.0, SCOPE) == {"t": 6}, "later does not exist yet"
    counts.changed({"t": 8, "later": 3, "unrelated": 5})
    assert counts.get({"t", "later"}, 2.0, SCOPE) == {"t": 8, "later": 3}
    assert counts.get({"unrelated"}, 2.0, SCOPE) is None, "never fetched: not trusted"
    counts.changed({"t": 0})  # deleted
    assert counts.get({"t", "later"}, 3.0, SCOPE) == {"later": 3}
