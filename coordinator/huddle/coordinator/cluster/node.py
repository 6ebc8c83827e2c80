"""One node of a coordinator cluster: its registration, its lease and the shards it owns.

Keys under the cluster's prefix ``P``:

- ``P/config/shards``: the shard count, written by the first node; fixed for the cluster.
- ``P/nodes/<node id>``: the node's advertised address, under its lease.
- ``P/shards/<n>``: the node that owns shard ``n``, under that node's lease; the key's
  revision is the shard's *epoch*.

A node keeps its lease alive and judges it by its own clock (``LeaseGuard``): past the
guard's deadline it serves nothing. Every third of the TTL it reads the nodes and owners,
computes the layout every node computes (``target_owners``), claims the unowned shards meant
for it and releases the ones meant for another node (it stops serving one before it deletes
its key, and the delete is fenced on its epoch).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import structlog

from huddle.coordinator.cluster.layout import target_owners
from huddle.coordinator.cluster.lease import LeaseGuard
from huddle.coordinator.cluster.store import EtcdStore, Lease

log = structlog.get_logger("huddle.cluster")


class ClusterConfigError(Exception):
    """The cluster's kept configuration, or another node, conflicts with this node's."""


def _ms() -> float:
    return time.monotonic() * 1000.0


class ClusterNode:
    def __init__(
        self,
        store: EtcdStore,
        *,
        node_id: str,
        advertise: str,
        shards: int,
        prefix: str = "/huddle",
        ttl_s: int = 3,
        margin_ms: float | None = None,
        clock: Callable[[], float] = _ms,
    ) -> None:
        if shards < 1:
            raise ClusterConfigError(f"the shard count must be at least 1, not {shards}")
        self.store = store
        self.node_id = node_id
        self.advertise = advertise
        self.shards = shards
        self.prefix = prefix.rstrip("/")
        self.ttl_s = ttl_s
        margin = ttl_s * 1000.0 / 3 if margin_ms is None else margin_ms
        self.guard = LeaseGuard(ttl_ms=ttl_s * 1000.0, margin_ms=margin)
        self.clock = clock
        self.lease: Lease | None = None
        self._owned: dict[int, int] = {}  # shard -> epoch

    # --- keys ---------------------------------------------------------------------

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.prefix, *parts)).encode()

    def owned(self) -> dict[int, int]:
        """The shards this node serves now, with their epochs (none past its deadline)."""
        if not self.guard.serving(self.clock()):
            self._fence("its lease may have expired")
        return dict(self._owned)

    def _fence(self, why: str) -> None:
        if self._owned:
            log.warning("shards_fenced", node=self.node_id, shards=sorted(self._owned), why=why)
            self._owned.clear()

    # --- start ----------------------------------------------------------------------

    async def register(self, wait_s: float | None = None) -> None:
        """Check the cluster's configuration, take a lease and register this node. A node
        restarted under the same id waits for its previous registration to expire (at
        most ``wait_s``, by default the TTL and a second)."""
        key = self._key("config", "shards")
        if not await self.store.create(key, str(self.shards).encode()):
            kept = await self.store.get(key)
            value = kept.value.decode(errors="replace") if kept is not None else "?"
            if value != str(self.shards):
                raise ClusterConfigError(
                    f"the cluster under {self.prefix} has {value} shards, not {self.shards}"
                )
        for name, entry in (await self.store.get_prefix(self._key("nodes") + b"/")).items():
            other = name.decode().rsplit("/", 1)[-1]
            if other != self.node_id and entry.value == self.advertise.encode():
                raise ClusterConfigError(
                    f"node {other} already advertises {self.advertise}: each node needs "
                    "its own address"
                )
        me = self._key("nodes", self.node_id)
        wait_ms = (self.ttl_s + 1.0) * 1000.0 if wait_s is None else wait_s * 1000.0
        give_up = self.clock() + wait_ms
        waiting = False
        while await self.store.get(me) is not None:
            if self.clock() >= give_up:
                raise ClusterConfigError(f"a live node is already registered as {self.node_id}")
            if not waiting:
                waiting = True
                log.info("waiting_for_previous_registration", node=self.node_id)
            await anyio.sleep(0.1)
        granted_at = self.clock()  # etcd counts the lease from its grant: so does the guard
        lease = await self.store.grant(self.ttl_s)
        if await self.store.claim(me, self.advertise.encode(), lease) is None:
            await self.store.revoke(lease)
            raise ClusterConfigError(f"a live node is already registered as {self.node_id}")
        self.lease = lease
        self.guard = LeaseGuard(ttl_ms=self.guard.ttl_ms, margin_ms=self.guard.margin_ms)
        self.guard.answered(granted_at, lease.ttl_s)
        log.info("node_registered", node=self.node_id, advertise=self.advertise, lease=lease.id)

    # --- running --------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the lease and the shards, until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keep_lease)
            tg.start_soon(self._keep_shards)

    async def _keep_lease(self) -> None:
        while True:
            now = self.clock()
            await anyio.sleep(max(0.0, (self.guard.next_refresh(now) - now) / 1000.0))
            lease = self.lease
            if lease is None:
                return
            sent = self.clock()
            try:
                with anyio.fail_after(self.ttl_s):
                    left = await self.store.refresh(lease)
            except Exception as exc:  # unreachable store: the guard's deadline decides
                log.warning("lease_refresh_failed", node=self.node_id, error=type(exc).__name__)
                await anyio.sleep(0.1)
                continue
            self.guard.answered(sent, left)
            if self.guard.lost:
                self._fence("etcd says its lease expired")
                log.error("lease_lost", node=self.node_id, lease=lease.id)
                return

    async def _keep_shards(self) -> None:
        while True:
            try:
                await self.reconcile()
            except Exception as exc:  # the store is away: try again on the next tick
                log.warning("reconcile_failed", node=self.node_id, error=type(exc).__name__)
            await anyio.sleep(self.ttl_s / 3)

    async def reconcile(self) -> None:
        """Claim the unowned shards meant for this node; release the ones meant for others."""
        lease = self.lease
        if lease is None or not self.guard.serving(self.clock()):
            self._fence("its lease may have expired")
            return
        nodes = {
            name.decode().rsplit("/", 1)[-1]
            for name in await self.store.get_prefix(self._key("nodes") + b"/")
        }
        current: dict[int, str] = {}
        epochs: dict[int, int] = {}
        for name, entry in (await self.store.get_prefix(self._key("shards") + b"/")).items():
            number = name.decode().rsplit("/", 1)[-1]
            if number.isdigit() and int(number) < self.shards:
                current[int(number)] = entry.value.decode(errors="replace")
                epochs[int(number)] = entry.revision
        for shard, epoch in list(self._owned.items()):
            if current.get(shard) != self.node_id or epochs.get(shard) != epoch:
                del self._owned[shard]  # deposed: another epoch holds it
                log.warning("shard_deposed", node=self.node_id, shard=shard)
        target = target_owners(self.shards, nodes, current)
        for shard, owner in sorted(target.items()):
            mine = current.get(shard) == self.node_id
            if owner == self.node_id and shard not in current:
                claimed = await self.store.claim(
                    self._key("shards", str(shard)), self.node_id.encode(), lease
                )
                if claimed is not None and self.guard.serving(self.clock()):
                    self._owned[shard] = claimed
                    log.info("shard_taken", node=self.node_id, shard=shard, epoch=claimed)
            elif owner != self.node_id and mine:
                held = self._owned.pop(shard, epochs[shard])  # stop serving it first
                key = self._key("shards", str(shard))
                await self.store.write_fenced(key, held, {}, deletes=[key])
                log.info("shard_released", node=self.node_id, shard=shard, to=owner)
            elif mine and shard not in self._owned and epochs[shard]:
                self._owned[shard] = epochs[shard]  # kept across a restart of the loop

    async def leave(self) -> None:
        """Stop serving everything and give the shards up at once (a clean shutdown)."""
        self._owned.clear()
        if self.lease is not None:
            lease, self.lease = self.lease, None
            await self.store.revoke(lease)
