"""A node's lease, with an explicit clock: it fences itself before etcd can expire it."""

from __future__ import annotations

import pytest

from huddle.coordinator.cluster.lease import LeaseGuard


def test_a_node_stops_serving_a_margin_before_etcd_can_expire_its_lease() -> None:
    guard = LeaseGuard(ttl_ms=3_000, margin_ms=500)
    assert not guard.serving(0.0)  # no lease yet
    guard.answered(sent_at=1_000.0, ttl_left_s=3)
    assert guard.serving(3_000.0)
    deadline = guard.deadline
    assert deadline is not None
    assert 1_000 + 2_500 * 0.999 <= deadline <= 1_000 + 2_500  # and etcd's is >= 4,000
    assert not guard.serving(3_500.0)


def test_the_proof_counts_from_the_send_not_from_the_answer() -> None:
    """Frozen with the answer in its socket: the late answer proves only its send time."""
    guard = LeaseGuard(ttl_ms=3_000, margin_ms=500)
    guard.answered(sent_at=1_000.0, ttl_left_s=3)
    guard.answered(sent_at=500.0, ttl_left_s=3)  # an older keep-alive answered last
    assert guard.proof_sent_at == 1_000.0
    assert not guard.serving(60_000.0)


def test_a_lease_etcd_says_is_gone_never_serves_again() -> None:
    guard = LeaseGuard(ttl_ms=3_000, margin_ms=500)
    guard.answered(sent_at=0.0, ttl_left_s=3)
    guard.answered(sent_at=900.0, ttl_left_s=0)
    assert guard.lost
    assert not guard.serving(901.0)
    guard.answered(sent_at=1_000.0, ttl_left_s=3)  # a late answer for the dead lease
    assert not guard.serving(1_001.0)


def test_keep_alives_go_out_every_third_of_the_ttl() -> None:
    guard = LeaseGuard(ttl_ms=3_000, margin_ms=500)
    assert guard.next_refresh(5.0) == 5.0
    guard.answered(sent_at=0.0, ttl_left_s=3)
    assert guard.next_refresh(10.0) == 1_000.0


@pytest.mark.parametrize("margin", [-1.0, 3_000.0, 5_000.0])
def test_a_margin_not_under_the_ttl_is_refused(margin: float) -> None:
    with pytest.raises(ValueError, match="safety margin"):
        LeaseGuard(ttl_ms=3_000, margin_ms=margin)
