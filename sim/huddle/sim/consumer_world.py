"""One simulated run of the consumer group protocol (KIP-848): ``World`` with the server's
consumer groups on the coordinator (``consumer_host``), members on the consumer protocol
(``consumer_process``) and the protocol's own checks (``consumer_checks``). The faults, the
clock, the network and the run are the world's, as for every protocol.
"""

from __future__ import annotations

from typing import cast

from huddle.coordinator.consumer import ConsumerGroupConfig, GroupPhase
from huddle.sim.application import GROUP_ID
from huddle.sim.consumer_checks import ConsumerChecker
from huddle.sim.consumer_host import ConsumerPart
from huddle.sim.consumer_process import ConsumerProcess
from huddle.sim.invariants import Checker
from huddle.sim.process import MemberProcess
from huddle.sim.world import World

CONSUMER = "consumer"  # the protocol's name under ``huddle sim run``


class ConsumerWorld(World):
    consumer: ConsumerPart

    def _checker(self) -> Checker:
        return ConsumerChecker(self)

    def _consumer_part(self) -> ConsumerPart:
        config = self.config
        self.consumer = ConsumerPart(
            self.sched,
            ConsumerGroupConfig(
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
            ),
            cast(ConsumerChecker, self.checker),
            self._keep_changes,
            self.parts.consumer_group,
        )
        return self.consumer

    def _keep_changes(self) -> None:
        self.host.keep_changes()

    def _process(self, index: int, *, static: bool) -> MemberProcess:
        return ConsumerProcess(self, index, static=static)

    def _started(self) -> None:
        self.consumer.group(GROUP_ID)

    @property
    def processes(self) -> list[ConsumerProcess]:
        return cast(list[ConsumerProcess], self.members)

    def converged(self) -> bool:
        core = self.consumer.core
        coordinator = self.host.core
        if core is None or coordinator is None:
            return False
        group = core.groups.get(GROUP_ID)
        if group is None or group.phase is not GroupPhase.STABLE:
            return False
        processes = self.processes
        if not all(m.stable for m in processes):
            return False
        if set(group.members) != {m.consumer.member_id for m in processes}:
            return False
        if any(
            group.members[m.consumer.member_id].member_epoch != m.consumer.epoch for m in processes
        ):
            return False
        return self.processed_once(coordinator)

    def _why_not(self) -> str:
        core = self.consumer.core
        coordinator = self.host.core
        if core is None or coordinator is None:
            return "the coordinator is down"
        group = core.groups.get(GROUP_ID)
        if group is None:
            return "no group"
        unstable = [m.index for m in self.processes if not m.stable]
        return (
            f"group {group.phase.value} at epoch {group.group_epoch} (target "
            f"{group.target_epoch}); members not stable: {unstable}; "
            f"{self.processed(coordinator)}"
        )
