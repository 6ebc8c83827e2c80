"""One node of a coordinator cluster: its registration, its lease and the shards it owns.

Keys under the cluster's prefix ``P``:

- ``P/config/shards``: the shard count, written by the first node; fixed for the cluster.
- ``P/nodes/<node id>``: the node's advertised address, under its lease.
- ``P/addresses/<address>``: the node advertising it, under its lease (one node per address).
- ``P/shards/<n>``: the node that owns shard ``n``, under that node's lease; the key's
  revision is the shard's *epoch*.
- ``P/security``: the users and ACLs (``huddle users``, ``huddle acls``), read by every node.
- ``P/kafka/<node id>``: the node's Kafka address, with ``--kafka-port``
  (``huddle.coordinator.cluster.kafka_nodes``).

A node keeps its lease alive and judges it by its own clock (``LeaseGuard``): past the
guard's deadline it serves nothing. Every third of the TTL it reads the nodes and owners,
computes the layout every node computes (``target_owners``), claims the unowned shards meant
for it and releases the ones meant for another node (it stops serving one before it deletes
its key, and the delete is fenced on its epoch). Nothing is written under an epoch once a
write under it has an unknown outcome (``renew``): a shard it still owns but stopped serving
(a write failed, the lease's deadline passed) is served again only under a new epoch.

Each of the node's loops (the lease keeper, the deadline fence, the reconcile loop, the
watches) runs supervised (``huddle.coordinator.supervisor``): one that dies is started again,
one that makes no progress for its ``stall_s`` is cancelled and started again, both logged.
Every etcd call has a deadline (``EtcdStore``). ``liveness`` tells how long ago the lease was
last refreshed and the shards last reconciled.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote

import anyio
import structlog

from huddle.coordinator.cluster import kafka_nodes
from huddle.coordinator.cluster.layout import target_owners
from huddle.coordinator.cluster.lease import LeaseGuard
from huddle.coordinator.cluster.store import WATCH_IDLE_S, EtcdStore, Lease
from huddle.coordinator.supervisor import Beat, Body, Restarts, supervise
from huddle.protocol.errors import HuddleError
from huddle.protocol.messages import NodeLiveness

log = structlog.get_logger("huddle.cluster")


# Every key family a cluster writes under its prefix: a prefix holding anything else is
# refused at start. A topic created while a node registers (its id and cuts written with
# it), or a consumer group kept, must not make the next node refuse the prefix.
OURS = frozenset(
    b"config nodes addresses shards topics topic-ids topic-cuts groups consumer-groups "
    b"offsets security kafka".split()
)


class ClusterConfigError(HuddleError):
    """The cluster's kept configuration, or another node, conflicts with this node's."""


class ShardListener(Protocol):
    """What serves the shards: told when one is taken (load it: the node serves it once
    this returns), lost (stop serving at once) or about to be released (finish writing)."""

    async def shard_taken(self, shard: int, epoch: int) -> None: ...

    def shards_lost(self, shards: list[int], why: str) -> None: ...

    async def shard_releasing(self, shard: int) -> None: ...


class _Nobody:
    async def shard_taken(self, shard: int, epoch: int) -> None:
        return None

    def shards_lost(self, shards: list[int], why: str) -> None:
        return None

    async def shard_releasing(self, shard: int) -> None:
        return None


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
        listener: ShardListener | None = None,
        kafka_advertise: str = "",
    ) -> None:
        if shards < 1:
            raise ClusterConfigError(f"the shard count must be at least 1, not {shards}")
        self.store = store
        self.node_id = node_id
        self.advertise = advertise
        self.kafka_advertise = kafka_advertise  # "": no Kafka listener
        self.shards = shards
        self.prefix = prefix.rstrip("/")
        self.ttl_s = ttl_s
        margin = ttl_s * 1000.0 / 3 if margin_ms is None else margin_ms
        self.guard = LeaseGuard(ttl_ms=ttl_s * 1000.0, margin_ms=margin)
        self.clock = clock
        self.lease: Lease | None = None
        self.listener: ShardListener = listener if listener is not None else _Nobody()
        self._owned: dict[int, int] = {}  # shard -> epoch
        # shard -> the serving it is in: a new number each time the node begins serving it,
        # so a change made in one serving is never written in a later one (the epoch alone
        # does not tell: it is also renewed while a serving goes on)
        self._servings: dict[int, int] = {}
        self._serving_numbers = itertools.count(1)
        self.loading: set[int] = set()  # claimed, not served yet
        self._poke = anyio.Event()  # set: reconcile now
        # the cluster as last read: live nodes' addresses, and each shard's owner
        self.addresses: dict[str, str] = {}
        self.kafka_addresses: dict[str, str] = {}  # of the live nodes that have a listener
        self.owners: dict[int, str] = {}
        self.epochs: dict[int, int] = {}
        self.lease_refreshed_at: float | None = None  # on its clock
        self.reconciled_at: float | None = None
        self.restarts = Restarts()
        self._leaving = False

    # --- keys ---------------------------------------------------------------------

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.prefix, *parts)).encode()

    @property
    def owned_count(self) -> int:
        """How many shards it holds now, as last decided (read from any thread: metrics)."""
        return len(self._owned)

    def owned(self) -> dict[int, int]:
        """The shards this node serves now, with their epochs (none past its deadline)."""
        if not self.guard.serving(self.clock()):
            self._fence("its lease may have expired")
        return dict(self._owned)

    def serves(self, shard: int) -> bool:
        """Whether this node serves ``shard`` now (never past its lease's deadline)."""
        if shard not in self._owned:
            return False
        if not self.guard.serving(self.clock()):
            self._fence("its lease may have expired")
            return False
        return True

    def epoch(self, shard: int) -> int | None:
        return self._owned.get(shard) if self.serves(shard) else None

    def serving(self, shard: int) -> int | None:
        """The number of the serving of ``shard`` under way now, if it is served."""
        return self._servings.get(shard) if self.serves(shard) else None

    def _fence(self, why: str) -> None:
        if self._owned:
            lost = sorted(self._owned)
            log.warning("shards_fenced", node=self.node_id, shards=lost, why=why)
            self._owned.clear()
            self.listener.shards_lost(lost, why)

    def depose(self, shard: int, why: str, epoch: int | None = None) -> None:
        """Stop serving ``shard`` (a write fenced on its epoch was refused, or failed); if
        ``epoch`` is given, only if the shard is served under it (a write made under an
        epoch a later serving has moved on from says nothing of that serving)."""
        if epoch is not None and self._owned.get(shard) != epoch:
            return
        if self._owned.pop(shard, None) is not None:
            log.warning("shard_deposed", node=self.node_id, shard=shard, why=why)
            self.listener.shards_lost([shard], why)

    # --- start ----------------------------------------------------------------------

    async def register(self, wait_s: float | None = None) -> None:
        """Check the cluster's configuration, take a lease and register this node. A node
        restarted under the same id waits for its previous registration to expire (at
        most ``wait_s``, by default the TTL and a second)."""
        key = self._key("config", "shards")
        if await self.store.get(key) is None:
            root = self.prefix.encode() + b"/"
            found = [
                k for k in await self.store.keys(root) if k[len(root) :].split(b"/")[0] not in OURS
            ]
            if found:
                raise ClusterConfigError(
                    f"{self.prefix} in etcd holds {len(found)} keys that are not a huddle "
                    f"cluster's (e.g. {found[0].decode(errors='replace')}): choose another "
                    "--cluster-prefix"
                )
        if not await self.store.create(key, str(self.shards).encode()):
            kept = await self.store.get(key)
            value = kept.value.decode(errors="replace") if kept is not None else "?"
            if not value.isdigit():
                raise ClusterConfigError(
                    f"{key.decode()} holds {value!r}, not a shard count: {self.prefix} is not "
                    "a huddle cluster's prefix"
                )
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
        if self.kafka_advertise:  # before the node's key: whoever finds the node finds it
            why = await kafka_nodes.claim(
                self.store, self.prefix, self.node_id, self.kafka_advertise, lease
            )
            if why:
                await self.store.revoke(lease)
                raise ClusterConfigError(why)
        if await self.store.claim(me, self.advertise.encode(), lease) is None:
            await self.store.revoke(lease)
            raise ClusterConfigError(f"a live node is already registered as {self.node_id}")
        # the address too, in one place per address: two nodes starting at once with one
        # address cannot both pass the check above
        address = self._key("addresses", quote(self.advertise, safe=""))
        if await self.store.claim(address, self.node_id.encode(), lease) is None:
            holder = await self.store.get(address)
            await self.store.revoke(lease)
            other = holder.value.decode(errors="replace") if holder is not None else "another"
            raise ClusterConfigError(
                f"node {other} already advertises {self.advertise}: each node needs its own address"
            )
        self.lease = lease
        self.guard = LeaseGuard(ttl_ms=self.guard.ttl_ms, margin_ms=self.guard.margin_ms)
        self.guard.answered(granted_at, lease.ttl_s)
        self.lease_refreshed_at = self.clock()
        log.info("node_registered", node=self.node_id, advertise=self.advertise, lease=lease.id)

    # --- running --------------------------------------------------------------------

    def liveness(self) -> NodeLiveness:
        """Seconds since the lease was last refreshed (or granted) and since the shards were
        last reconciled, how often a loop had to be started again, and whether the node is
        registered (holds a lease) now."""
        now = self.clock()

        def ago(at: float | None) -> float | None:
            return None if at is None else round(max(now - at, 0.0) / 1000.0, 3)

        return NodeLiveness(
            lease_refreshed_s_ago=ago(self.lease_refreshed_at),
            reconciled_s_ago=ago(self.reconciled_at),
            task_restarts=self.restarts.total,
            registered=self.lease is not None and not self.guard.lost,
        )

    async def run(self) -> None:
        """Keep the lease and the shards, until cancelled: each loop supervised."""
        ttl = float(self.ttl_s)
        call = self.store.longest_call_s  # each etcd call is progress (see EtcdStore)
        watch = self._key("nodes") + b"/", self._key("shards") + b"/"
        loops: list[tuple[str, Body, float]] = [
            ("lease keeper", self._keep_lease, ttl + call + 1.0),
            ("deadline fence", self._fence_at_deadline, ttl + 1.0),
            # a release waits for the batch being written (within a few etcd deadlines)
            ("reconcile", self._keep_shards, ttl + 2 * call + 1.0),
            ("nodes watch", lambda beat: self._watch(watch[0], beat), watch_stall_s(self.store)),
            ("shards watch", lambda beat: self._watch(watch[1], beat), watch_stall_s(self.store)),
        ]
        await asyncio.gather(
            *(
                supervise(
                    name,
                    body,
                    stall_s=stall,
                    fields={"node": self.node_id},
                    restarts=self.restarts,
                )
                for name, body, stall in loops
            )
        )

    async def _watch(self, prefix: bytes, beat: Beat) -> None:
        """Reconcile as soon as a node or a shard owner comes or goes (a dead node's keys
        vanish when its lease expires), not only every third of the TTL."""
        while True:
            beat()
            try:
                _, revision = await self.store.read_prefix(prefix)
                self._poke.set()  # whatever changed before the watch began
                async for _ in self.store.watch_prefix(prefix, revision + 1, alive=beat):
                    beat()
                    self._poke.set()
            except Exception as exc:  # the store is away: the periodic reconcile goes on
                log.debug("cluster_watch_failed", node=self.node_id, error=type(exc).__name__)
            await anyio.sleep(self.ttl_s / 3)

    async def _keep_lease(self, beat: Beat) -> None:
        while True:
            beat()
            now = self.clock()
            await anyio.sleep(max(0.0, (self.guard.next_refresh(now) - now) / 1000.0))
            lease = self.lease
            if lease is None:
                if self._leaving:
                    await anyio.sleep(self.ttl_s / 3)  # it left: nothing to keep
                    continue
                await self._register_again(beat)  # lost while a refresh failed, say
                continue
            sent = self.clock()
            try:
                left = await self.store.refresh(lease)
            except Exception as exc:  # unreachable store: the guard's deadline decides
                log.warning("lease_refresh_failed", node=self.node_id, error=type(exc).__name__)
                await anyio.sleep(0.1)
                continue
            self.guard.answered(sent, left)
            if self.guard.lost:
                self._fence("etcd says its lease expired")
                log.error("lease_lost", node=self.node_id, lease=lease.id)
                await self._register_again(beat)
            elif self.lease is lease:
                self.lease_refreshed_at = self.clock()

    async def _fence_at_deadline(self, beat: Beat) -> None:
        """Stop serving at the lease's deadline even if nothing asks then: a timer of the
        coordinator's (a join phase ending, say) must not answer for a group after it."""
        while True:
            beat()
            now = self.clock()
            deadline = self.guard.deadline
            if deadline is None or now >= deadline:
                self._fence("its lease may have expired")
                wait_ms = self.ttl_s * 1000.0 / 3
            else:  # a keep-alive answered meanwhile only moves the deadline later
                wait_ms = min(deadline - now, self.ttl_s * 1000.0 / 3)
            await anyio.sleep(wait_ms / 1000.0)

    async def _register_again(self, beat: Beat) -> None:
        """After losing its lease (etcd was away longer than the TTL, or the node was
        frozen), the node joins again under a new lease and takes shards as a new node."""
        self.lease = None
        while not self._leaving:
            beat()
            try:
                await self.register()
                log.info("node_rejoined", node=self.node_id)
                self._poke.set()
                return
            except Exception as exc:  # etcd still away, or our old entry still there
                log.warning("register_failed", node=self.node_id, error=str(exc) or repr(exc))
                await anyio.sleep(1.0)

    async def _keep_shards(self, beat: Beat) -> None:
        while True:
            beat()
            self._poke = anyio.Event()
            try:
                await self.reconcile()
            except Exception as exc:  # the store is away: try again on the next tick
                log.warning("reconcile_failed", node=self.node_id, error=type(exc).__name__)
            with anyio.move_on_after(self.ttl_s / 3):
                await self._poke.wait()

    async def reconcile(self) -> None:
        """Claim the unowned shards meant for this node; release the ones meant for others."""
        lease = self.lease
        if lease is None or not self.guard.serving(self.clock()):
            self._fence("its lease may have expired")
            return
        registered = await self.store.get_prefix(self._key("nodes") + b"/")
        self.addresses = {
            name.decode().rsplit("/", 1)[-1]: entry.value.decode(errors="replace")
            for name, entry in registered.items()
        }
        kafka = await kafka_nodes.read(self.store, self.prefix)
        self.kafka_addresses = {n: a for n, a in kafka.items() if n in self.addresses}
        nodes = set(self.addresses)
        current: dict[int, str] = {}
        epochs: dict[int, int] = {}
        for name, entry in (await self.store.get_prefix(self._key("shards") + b"/")).items():
            number = name.decode().rsplit("/", 1)[-1]
            if number.isdigit() and int(number) < self.shards:
                current[int(number)] = entry.value.decode(errors="replace")
                epochs[int(number)] = entry.revision
        self.owners = dict(current)
        self.epochs = dict(epochs)
        for shard, epoch in list(self._owned.items()):
            # an older epoch read: the node renewed it since the read (``renew``)
            if current.get(shard) != self.node_id or epochs.get(shard, 0) > epoch:
                self.depose(shard, "another epoch holds it")
        target = target_owners(self.shards, nodes, current)
        for shard, owner in sorted(target.items()):
            mine = current.get(shard) == self.node_id
            if owner == self.node_id and shard not in current:
                claimed = await self.store.claim(
                    self._key("shards", str(shard)), self.node_id.encode(), lease
                )
                if claimed is not None:
                    self.owners[shard] = self.node_id
                    self.epochs[shard] = claimed
                    await self._serve(shard, claimed, lease)
            elif owner != self.node_id and mine:
                held = self._owned.pop(shard, epochs[shard])  # stop serving it first
                self.listener.shards_lost([shard], f"handed to {owner}")
                # the write under way lands; later ones refuse what this serving changed
                await self.listener.shard_releasing(shard)
                key = self._key("shards", str(shard))
                await self.store.write_fenced(key, held, {}, deletes=[key])
                log.info("shard_released", node=self.node_id, shard=shard, to=owner)
            elif mine and shard not in self._owned and epochs[shard]:
                # its load failed, a write failed or may have, or the lease's deadline
                # passed: taken up again from what etcd holds, under a new epoch
                await self._serve_again(shard, epochs[shard], lease)
        if self.lease is lease:
            self.reconciled_at = self.clock()

    async def renew(self, shard: int, epoch: int) -> int | None:
        """Move the epoch of a shard this node serves under ``epoch`` on (a write made under
        it has an unknown outcome: from now on it is refused wherever it lands), the serving
        going on under the new one; None if it is no longer served under ``epoch``, or could
        not be (then it is not served any more). A shard served under another epoch is a
        later serving, loaded from etcd after that epoch was left: it is not renewed (the
        write would be made again under it, which it does not hold) and goes on."""
        lease = self.lease
        if self._owned.get(shard) != epoch or lease is None:
            return None
        key = self._key("shards", str(shard))
        try:
            renewed = await self.store.renew(key, self.node_id.encode(), epoch, lease)
        except Exception as exc:  # its outcome unknown too: served again, renewed again
            why = f"its epoch could not be renewed: {type(exc).__name__}"
            self.depose(shard, why, epoch)
            return None
        if renewed is None:
            self.depose(shard, "another epoch holds it", epoch)
            return None
        if self._owned.get(shard) != epoch:
            return None  # deposed meanwhile: the next serving renews it again
        self._owned[shard] = self.epochs[shard] = renewed
        log.info("shard_epoch_renewed", node=self.node_id, shard=shard, old=epoch, epoch=renewed)
        return renewed

    async def _serve_again(self, shard: int, epoch: int, lease: Lease) -> None:
        """Serve a shard this node still owns in etcd but stopped serving, never under the
        epoch it served it under: a write made then whose outcome is unknown (its deadline
        passed, its connection was lost) may still be on its way, on a connection left
        behind, and would land after any write made since. The owner key is written again
        (fenced on that epoch, under the lease): its new revision is the new epoch, and
        that write, when it lands, is refused. Then it is loaded from etcd."""
        key = self._key("shards", str(shard))
        renewed = await self.store.renew(key, self.node_id.encode(), epoch, lease)
        if renewed is None:
            return  # it moved on meanwhile: the next reconcile sees where
        log.info("shard_epoch_renewed", node=self.node_id, shard=shard, old=epoch, epoch=renewed)
        self.epochs[shard] = renewed
        await self._serve(shard, renewed, lease)

    async def _serve(self, shard: int, epoch: int, lease: Lease) -> None:
        """Load ``shard`` (requests for it meanwhile are told to wait), then serve it, if
        the lease it was claimed under is still the node's and still alive."""
        self.loading.add(shard)
        try:
            await self.listener.shard_taken(shard, epoch)
        except Exception as exc:
            log.error("shard_load_failed", node=self.node_id, shard=shard, error=repr(exc))
            return
        finally:
            self.loading.discard(shard)
        if self.lease is lease and self.guard.serving(self.clock()):
            self._owned[shard] = epoch
            self._servings[shard] = next(self._serving_numbers)
            log.info("shard_taken", node=self.node_id, shard=shard, epoch=epoch)
        else:
            self.listener.shards_lost([shard], "its lease may have expired while loading")

    async def leave(self) -> None:
        """Stop serving everything and give the shards up at once (a clean shutdown)."""
        self._leaving = True
        self._fence("the node is leaving")
        if self.lease is not None:
            lease, self.lease = self.lease, None
            await self.store.revoke(lease)


def watch_stall_s(store: EtcdStore) -> float:
    """A watch's loop stalls past this: a quiet watch is made again after ``WATCH_IDLE_S``
    (the old one cancelled within the store's deadline, the new one made in one call)."""
    return WATCH_IDLE_S + store.timeout_s + store.longest_call_s + 1.0
