"""The seed's three situations against the real coordinator, for Designs I, II and III:
a process death where the process comes back within the delay, a rolling bounce, and scale
up / scale down. Each test asserts which partitions moved and how many rebalances it took."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
from huddle.testing import wait_settled

import huddle.client.assignors.deferred  # noqa: F401 - registers cooperative-deferred
from huddle.client import Admin, Assignor, Member, RebalanceListener, TopicPartition
from huddle.client.assignors.deferred import DeferredAssignor
from huddle.client.assignors.sticky import CooperativeStickyAssignor
from huddle.client.running import MemberTask
from tests.helpers import settled as members_settled
from tests.helpers import wait_until

TP = TopicPartition
PARTITIONS = frozenset(TP("t", p) for p in range(8))
DELAY_MS = 3_000


class Moves(RebalanceListener):
    """Which partitions this member stopped (revoked or lost) and started."""

    def __init__(self) -> None:
        self.stopped: set[TopicPartition] = set()
        self.started: set[TopicPartition] = set()

    async def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        self.stopped |= revoked

    async def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self.stopped |= lost

    async def on_partitions_assigned(self, assigned: frozenset[TopicPartition]) -> None:
        self.started |= assigned


class Proc:
    """A member in a task of its own, like a process: started, killed or stopped any time."""

    def __init__(
        self,
        bootstrap: str,
        assignor: Callable[[], Assignor],
        moves: Moves | None = None,
        **kwargs: Any,
    ) -> None:
        self.moves = moves or Moves()
        self.member = Member(
            bootstrap,
            group_id="g",
            topics=["t"],
            assignors=[assignor()],
            session_timeout_ms=10_000,
            heartbeat_interval_ms=200,
            rebalance_timeout_ms=5_000,
            listener=self.moves,
            **kwargs,
        )
        self._task = MemberTask(self.member)

    async def start(self, tg: anyio.abc.TaskGroup) -> Proc:
        await self._task.start(tg)
        return self

    async def kill(self) -> None:
        """kill -9: no LeaveGroup, the socket just closes."""
        await self._task.kill()

    async def stop(self) -> None:
        await self._task.stop()


def settled(procs: list[Proc], expected: frozenset[TopicPartition] = PARTITIONS) -> bool:
    return members_settled([p.member for p in procs], expected)


async def settled_generation(procs: list[Proc], within: float = 15) -> int:
    """The generation the group settles in (huddle.testing's ``wait_settled``)."""
    await wait_settled([p.member for p in procs], {"t": len(PARTITIONS)}, within=within)
    return procs[0].member.generation


def design_ii() -> Assignor:
    return DeferredAssignor(scheduled_rebalance_max_delay_ms=DELAY_MS)


async def _create_topic(bootstrap: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic("t", len(PARTITIONS))


async def process_death(bootstrap: str, assignor: Callable[[], Assignor]) -> dict[str, Any]:
    """4 members; one is killed and a replacement process starts 1 s later."""
    await _create_topic(bootstrap)
    async with anyio.create_task_group() as tg:
        procs = [await Proc(bootstrap, assignor).start(tg) for _ in range(4)]
        before = await settled_generation(procs)
        survivors, victim = procs[:3], procs[3]
        kept = {id(p): p.member.assignment for p in survivors}
        victims_partitions = victim.member.assignment
        for p in survivors:
            p.moves.stopped.clear()
            p.moves.started.clear()
        await victim.kill()
        # the replacement starts once the group has noticed the death and rebalanced
        # without the victim, as when an orchestrator restarts a dead process
        await wait_until(
            lambda: all(
                p.member.state.value == "stable" and p.member.generation > before for p in survivors
            ),
            what="the survivors to rebalance without the dead member",
        )
        back = await Proc(bootstrap, assignor).start(tg)
        after = await settled_generation([*survivors, back])
        result = {
            "survivors_moved": set().union(*(p.moves.stopped | p.moves.started for p in survivors)),
            "survivors_unchanged": all(p.member.assignment == kept[id(p)] for p in survivors),
            "back_got_its_own": back.member.assignment == victims_partitions,
            "rebalances": after - before,
        }
        for p in [*survivors, back]:
            await p.stop()
    return result


async def test_design_ii_process_death_moves_nothing_else(bootstrap: str) -> None:
    started = time.monotonic()
    r = await process_death(bootstrap, design_ii)
    assert r["survivors_moved"] == set()  # nothing else stopped or started
    assert r["survivors_unchanged"]
    assert r["back_got_its_own"]  # the returning process gets its own partitions back
    assert r["rebalances"] == 2  # the death (partitions held), the return (given back)
    assert time.monotonic() - started < DELAY_MS / 1000 + 10  # back before the delay ran out


async def test_design_i_process_death_moves_the_lost_partitions_twice(bootstrap: str) -> None:
    r = await process_death(bootstrap, CooperativeStickyAssignor)
    # the survivors took the victim's 2 partitions, then gave 2 up (the same or others)
    assert len(r["survivors_moved"]) >= 2
    assert r["rebalances"] == 3  # the death, then the return: a revoking round + follow-up


async def rolling_bounce(bootstrap: str, assignor: Callable[[], Assignor]) -> dict[str, Any]:
    await _create_topic(bootstrap)
    async with anyio.create_task_group() as tg:
        procs = [await Proc(bootstrap, assignor).start(tg) for _ in range(4)]
        first = await settled_generation(procs)
        moved = 0
        for i in range(len(procs)):
            others = [p for j, p in enumerate(procs) if j != i]
            for p in others:
                p.moves.stopped.clear()
            await procs[i].stop()
            procs[i] = await Proc(bootstrap, assignor).start(tg)
            await settled_generation(procs)
            moved += sum(len(p.moves.stopped) for p in others)
        last = procs[0].member.generation
        for p in procs:
            await p.stop()
    return {"others_stopped": moved, "rebalances": last - first}


async def test_rolling_bounce_design_ii_moves_nothing_but_the_bounced(bootstrap: str) -> None:
    deferred = await rolling_bounce(bootstrap, design_ii)
    assert deferred["others_stopped"] == 0  # bounced members get their own partitions back
    assert deferred["rebalances"] == 8  # two per bounce: leave (held), return (given back)


async def test_rolling_bounce_design_i_moves_partitions_of_others(bootstrap: str) -> None:
    sticky = await rolling_bounce(bootstrap, CooperativeStickyAssignor)
    assert sticky["others_stopped"] == 8  # each bounce spreads 2 partitions, then takes back
    assert sticky["rebalances"] == 12  # three per bounce: leave, revoking round, follow-up


async def scale(bootstrap: str, assignor: Callable[[], Assignor]) -> dict[str, Any]:
    """Scale up from 2 to 4 members, then down to 2 (clean leaves)."""
    await _create_topic(bootstrap)
    async with anyio.create_task_group() as tg:
        procs = [await Proc(bootstrap, assignor).start(tg) for _ in range(2)]
        g0 = await settled_generation(procs)
        for p in procs:
            p.moves.stopped.clear()
        procs += [await Proc(bootstrap, assignor).start(tg) for _ in range(2)]

        def balanced() -> bool:
            return settled(procs) and sorted(len(p.member.assignment) for p in procs) == [2] * 4

        # paced designs are stable (all owned) between batches: wait for the balance itself
        await wait_until(balanced, wait_s=20, what="the scaled-up group to balance")
        g1 = procs[0].member.generation
        up_stopped = sum(len(p.moves.stopped) for p in procs[:2])
        balanced_up = balanced()
        for p in procs[2:]:
            await p.stop()
        procs = procs[:2]
        g2 = await settled_generation(procs, within=DELAY_MS / 1000 + 15)
        balanced_down = sorted(len(p.member.assignment) for p in procs) == [4, 4]
        for p in procs:
            await p.stop()
    return {
        "up_rebalances": g1 - g0,
        "up_stopped": up_stopped,
        "balanced_up": balanced_up,
        "down_rebalances": g2 - g1,
        "balanced_down": balanced_down,
    }


async def test_scale_up_and_down_design_i(bootstrap: str) -> None:
    r = await scale(bootstrap, CooperativeStickyAssignor)
    assert r["balanced_up"]
    assert r["balanced_down"]
    assert r["up_stopped"] == 4  # only what moves to the new members stops
    assert r["up_rebalances"] == 2  # revoking round + follow-up
    assert r["down_rebalances"] in (1, 2)  # one per leave (two leaves may coalesce)


async def test_scale_up_and_down_design_ii(bootstrap: str) -> None:
    r = await scale(bootstrap, design_ii)
    assert r["balanced_up"]
    assert r["up_stopped"] == 4
    assert r["up_rebalances"] == 2  # scale up is resolved at once, as in Design I
    assert r["balanced_down"]  # after the delay the leavers' partitions are spread
    assert r["down_rebalances"] in (2, 3)  # the leaves (held), then the delay's expiry


async def test_scale_up_design_iii_moves_at_most_k_per_round(bootstrap: str) -> None:
    def paced() -> Assignor:
        return DeferredAssignor(
            scheduled_rebalance_max_delay_ms=DELAY_MS, max_moves_per_round=1, move_pause_ms=100
        )

    r = await scale(bootstrap, paced)
    assert r["balanced_up"]
    assert r["up_stopped"] == 4
    assert r["up_rebalances"] == 8  # one partition at a time: 4 x (revoking round + follow-up)


async def test_kip441_stateful_work_moves_only_once_warm(bootstrap: str) -> None:
    """A new member with stale local state gets warm-ups, not actives; once it reports them
    caught up, a probing rebalance moves the actives; the group ends balanced."""
    from huddle.client.assignors.high_availability import HighAvailabilityAssignor

    def ha() -> Assignor:
        return HighAvailabilityAssignor(
            acceptable_recovery_lag=100, max_warmup_replicas=2, probing_rebalance_interval_ms=300
        )

    await _create_topic(bootstrap)
    everything = PARTITIONS
    warmups_seen: list[frozenset[TopicPartition]] = []

    class Replicas(Moves):
        async def on_replicas_assigned(
            self, standby: frozenset[TopicPartition], warmup: frozenset[TopicPartition]
        ) -> None:
            warmups_seen.append(warmup)

    async with anyio.create_task_group() as tg:
        old = await Proc(bootstrap, ha, lags=lambda: dict.fromkeys(everything, 0)).start(tg)
        await settled_generation([old])
        restored: set[TopicPartition] = set()  # local state it has caught up on, kept on disk

        def new_lags() -> dict[TopicPartition, int]:
            # stale state everywhere, except what it has restored: its warm-ups (restoring
            # happens between rebalances) and what it runs; restored state stays on disk
            restored.update(new.member.warmup, new.member.assignment)
            lags = dict.fromkeys(everything, 50_000)
            lags.update(dict.fromkeys(restored, 0))
            return lags

        new = Proc(bootstrap, ha, moves=Replicas(), lags=new_lags)
        await new.start(tg)
        await wait_until(lambda: bool(new.member.warmup), wait_s=10, what="warm-ups")
        assert new.member.assignment == frozenset()  # no active before it is warm
        assert len(new.member.warmup) <= 2
        await wait_until(
            lambda: (
                settled([old, new])
                and sorted(len(p.member.assignment) for p in (old, new)) == [4, 4]
            ),
            wait_s=20,
            what="the probing rebalances to move the actives",
        )
        assert warmups_seen  # the application was told about its warm-ups
        await new.stop()
        await old.stop()
