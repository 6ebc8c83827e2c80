"""A kept group as the simulator sees it across a coordinator restart: seed 1299 of
high-availability found a record that paired a generation's assignment with a subscription
sent for the next one."""

from __future__ import annotations

from huddle.sim import SimConfig, simulate

SEED = 1299
CONFIG = SimConfig(protocol="high-availability")
KEEP = [7, 10, 11, 12, 14, 19]  # the shrunk run `huddle sim run` printed


def _index(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if text in line)


def test_a_renamed_static_member_is_loaded_with_its_generation_s_subscription() -> None:
    """Member 3 (static, m3-c1-7) was assigned events-8..11 in generation 4, then rejoined
    falsely claiming events-21 too (assigned to m2-c1-3). Its process crashed; the new one
    took the instance over as m3-c1-10 while the group rebalanced, so the coordinator renamed
    the entry of generation 4's record. Then the coordinator crashed before generation 5 was
    synced, and its restart loaded generation 4 Stable from that record. The rename copied
    the old process's last JoinGroup (the false claim, made for generation 5) into the
    record beside generation 4's assignments, which the checker's look at the loaded round
    finds: ``cooperative-rounds``, m2-c1-3 assigned events-21 while m3-c1-10 claims it. A
    renamed entry keeps the subscription its assignment was made for."""
    lines: list[str] = []
    outcome = simulate(SEED, CONFIG, keep=KEEP, tracer=lines.append)
    assert outcome.violation is None, outcome.violation
    # the run still goes the way that found it
    claim = _index(lines, "member 3: false claim partition=events-21 generation=4")
    renamed = _index(
        lines, "member 3: receives frame=#1 JoinGroupResponse(generation_id=5, member_id=m3-c1-10"
    )
    crash = _index(lines, "coordinator-crash")
    back = _index(lines, "member 3: sends #4 request=JoinGroupRequest(member_id=m3-c1-10")
    assert claim < renamed < crash < back
    assert not any("member 3: receives" in line and "error_code=82" in line for line in lines)
