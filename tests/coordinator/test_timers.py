"""TimerQueue: deadlines by key, fired in order, moved cheaply (coordinator/timers.py)."""

from __future__ import annotations

from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.coordinator.timers import TimerQueue


def test_empty_queue_has_nothing_due() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    assert q.next_deadline() is None
    assert q.pop_due(1_000_000) == []
    assert len(q) == 0


def test_pop_due_returns_due_keys_earliest_first_and_only_once() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("a", 30)
    q.set("b", 10)
    q.set("c", 20)
    assert q.next_deadline() == 10
    assert q.pop_due(9) == []
    assert q.pop_due(25) == ["b", "c"]
    assert q.next_deadline() == 30
    assert q.pop_due(30) == ["a"]  # a deadline exactly at ``now`` is due
    assert q.pop_due(1_000) == []
    assert q.next_deadline() is None
    assert len(q) == 0


def test_a_key_moved_later_fires_after_keys_due_before_it() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("a", 0)
    q.set("a", 1)  # moved later: now due at 1
    q.set("b", 0)
    assert q.pop_due(1) == ["b", "a"]  # "earliest first", as the docstring says


def test_keys_with_the_same_deadline_fire_in_the_order_they_were_set() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    for key in ("x", "y", "z"):
        q.set(key, 5)
    assert q.pop_due(5) == ["x", "y", "z"]


def test_membership_and_deadline_lookup_follow_set_cancel_and_fire() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set(("session", "g", "m"), 100)
    assert ("session", "g", "m") in q
    assert q.deadline(("session", "g", "m")) == 100
    assert len(q) == 1
    q.pop_due(100)
    assert ("session", "g", "m") not in q
    assert q.deadline(("session", "g", "m")) is None


def test_moving_a_deadline_later_does_not_fire_it_early() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 10)
    q.set("k", 50)  # a heartbeat pushed the session out
    assert q.deadline("k") == 50
    # next_deadline may still name the old, earlier time (a lower bound) ...
    first = q.next_deadline()
    assert first is not None
    assert first <= 50
    # ... but nothing fires there: the entry re-arms at the current deadline.
    assert q.pop_due(first) == []
    assert q.pop_due(49) == []
    assert q.next_deadline() == 50
    assert q.pop_due(50) == ["k"]
    assert q.next_deadline() is None


def test_moving_a_deadline_earlier_fires_at_the_earlier_time_once() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 50)
    q.set("k", 10)
    assert q.next_deadline() == 10
    assert q.pop_due(9) == []
    assert q.pop_due(10) == ["k"]
    assert q.pop_due(50) == []  # the abandoned later entry does not fire again
    assert q.next_deadline() is None


def test_moving_back_and_forth_fires_once_at_the_last_deadline() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 10)
    q.set("k", 5)
    q.set("k", 10)
    assert q.pop_due(5) == []
    assert q.pop_due(10) == ["k"]
    assert q.pop_due(100) == []


def test_cancelled_key_never_fires() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 10)
    q.cancel("k")
    assert "k" not in q
    assert q.pop_due(100) == []


def test_cancel_of_an_unknown_key_is_harmless() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.cancel("nobody")
    q.set("k", 1)
    q.cancel("nobody")
    assert q.pop_due(1) == ["k"]


def test_cancel_then_set_later_fires_at_the_new_time() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 10)
    q.cancel("k")
    q.set("k", 20)
    assert q.pop_due(10) == []
    assert q.pop_due(19) == []
    assert q.pop_due(20) == ["k"]
    assert q.pop_due(100) == []


def test_cancel_then_set_earlier_fires_at_the_new_time() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 20)
    q.cancel("k")
    q.set("k", 5)
    assert q.next_deadline() == 5
    assert q.pop_due(5) == ["k"]
    assert q.pop_due(20) == []  # the cancelled entry stays dead


def test_next_deadline_skips_cancelled_entries() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("a", 10)
    q.set("b", 20)
    q.set("c", 30)
    q.cancel("a")
    assert q.next_deadline() == 20
    q.cancel("b")
    q.cancel("c")
    assert q.next_deadline() is None


def test_a_key_fired_can_be_armed_again() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 10)
    assert q.pop_due(10) == ["k"]
    q.set("k", 15)
    assert q.next_deadline() == 15
    assert q.pop_due(15) == ["k"]


def test_many_later_moves_of_one_key_keep_the_heap_small() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    for i in range(10_000):
        q.set("session", 1_000 + i)
    assert len(q._heap) <= 2
    assert q.pop_due(10_998) == []
    assert len(q._heap) <= 2
    assert q.pop_due(10_999) == ["session"]


def test_heartbeat_pattern_keeps_the_heap_at_about_one_entry_per_key() -> None:
    """Ten members heartbeat every 100 ms with a 1 s session while time moves on."""
    q: TimerQueue[Hashable] = TimerQueue()
    keys = [("session", "g", f"m{i}") for i in range(10)]
    for tick in range(10_000):
        now = tick * 10
        q.set(keys[tick % 10], now + 1_000)
        assert q.pop_due(now) == []
    assert len(q._heap) <= 2 * len(keys)


# --- against a reference model -----------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d", ("session", "g", "m")])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 200)),
        st.tuples(st.just("cancel"), KEYS, st.just(0)),
        st.tuples(st.just("pop"), KEYS, st.integers(0, 40)),  # the int: how far time moves
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_timer_queue_matches_a_dict_of_deadlines(ops: list[tuple[str, Hashable, int]]) -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    model: dict[Hashable, int] = {}
    now = 0
    for op, key, value in ops:
        if op == "set":
            q.set(key, value)
            model[key] = value
        elif op == "cancel":
            q.cancel(key)
            model.pop(key, None)
        else:
            now += value
            fired = q.pop_due(now)
            expected = {k for k, d in model.items() if d <= now}
            assert set(fired) == expected
            assert len(fired) == len(expected)  # nothing fires twice
            deadlines = [model[k] for k in fired]
            assert deadlines == sorted(deadlines)  # earliest deadline first
            for k in fired:
                del model[k]
        assert len(q) == len(model)
        for k in ("a", "b", "c", "d", ("session", "g", "m")):
            assert (k in q) == (k in model)
            assert q.deadline(k) == model.get(k)
        upcoming = q.next_deadline()
        if model:
            assert upcoming is not None
            assert upcoming <= min(model.values())  # never later than the real next one
        else:
            assert upcoming is None


def test_extend_moves_a_deadline_out_never_in() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.extend("k", 10)
    q.extend("k", 5)  # earlier: ignored
    assert q.deadline("k") == 10
    q.extend("k", 20)
    assert q.pop_due(15) == []
    assert q.pop_due(20) == ["k"]


def test_extend_after_cancel_fires_at_the_new_deadline_even_if_earlier() -> None:
    q: TimerQueue[Hashable] = TimerQueue()
    q.set("k", 100)
    q.cancel("k")
    q.extend("k", 10)  # the old heap entry (100) must not be what wakes it
    assert q.next_deadline() == 10
    assert q.pop_due(10) == ["k"]
