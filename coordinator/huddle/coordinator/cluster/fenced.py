"""A pass's group and offset changes, written to etcd in as few transactions as it takes.

Each shard's changes are fenced on its epoch (its owner key's revision). A pass's changes
for many shards go together: shards are packed whole into transactions of at most
``MAX_TXN_OPS`` operations (etcd refuses more than ``--max-txn-ops``, 128 by default), each
comparing the owner key of every shard it holds, and of at most ``MAX_TXN_BYTES`` bytes
(etcd refuses a request over ``--max-request-bytes``, 1.5 MiB by default); a shard with more
changes than that is written alone, in chunks, in turn. The transactions of one pass go at
once (they hold different shards, as the per-shard transactions did before).

A transaction is all or nothing. When one of its shards' epochs moved on (another node owns
it now), etcd writes nothing and reads, in the same transaction, the owner keys whose
revision is not the epoch: those shards are no longer served, and the others' changes are
written again without them (at most ``COMPARE_RETRIES`` times; then the shards left are not
served either, and are taken up again from etcd). A transaction whose outcome is unknown (no
answer within its deadline, its connection lost) may still land later: every shard in it
has its epoch renewed (that write is refused wherever it lands) and the changes are made
again once under the new epochs; a shard that cannot be renewed is no longer served. A
transaction etcd refuses for its size wrote nothing: it is made again a key at a time, and
a key refused alone is left out (``refused``; its shard still served). Only
the epoch a change was made under is renewed, never a later serving's (the shard lost and
taken up again while the write was under way: that serving loaded etcd without this change,
so it is not written under it; the pass is not kept, and that serving goes on).

Nothing here is acknowledged: ``write`` tells the keeper (``EtcdKeeper``) whether every
change was kept, and only then do the answers go out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import structlog

from huddle.coordinator.cluster.node import ClusterNode
from huddle.coordinator.cluster.store import EtcdStore, StoreRequestTooLargeError

log = structlog.get_logger("huddle.cluster")

MAX_TXN_OPS = 100  # below etcd's default --max-txn-ops (128)
MAX_TXN_BYTES = 1 << 20  # below etcd's default --max-request-bytes (1.5 MiB)
COMPARE_RETRIES = 2  # a transaction made again without the shards whose epoch moved on
Changes = dict[bytes, bytes | None]  # key -> value; None: delete


def size(changes: Changes) -> int:
    """The bytes a shard's changes take in a transaction (keys and values)."""
    return sum(len(key) + len(value or b"") for key, value in changes.items())


def pack(
    sizes: Mapping[int, int],
    limit: int = MAX_TXN_OPS,
    weights: Mapping[int, int] | None = None,
    max_bytes: int = MAX_TXN_BYTES,
) -> list[list[int]]:
    """Shards (by their number of changes, and their ``weights`` in bytes) packed whole
    into groups of at most ``limit`` changes and ``max_bytes`` bytes, in shard order, each
    group filled before the next begins; a shard over either limit is a group of its own."""
    groups: list[list[int]] = []
    current: list[int] = []
    room, room_bytes = limit, max_bytes
    for shard in sorted(sizes):
        count = sizes[shard]
        weight = 0 if weights is None else weights[shard]
        if count > limit or weight > max_bytes:
            groups.append([shard])
            continue
        if count > room or weight > room_bytes:
            groups.append(current)
            current, room, room_bytes = [], limit, max_bytes
        current.append(shard)
        room -= count
        room_bytes -= weight
    if current:
        groups.append(current)
    return groups


def chunks(
    changes: Changes, limit: int = MAX_TXN_OPS, max_bytes: int = MAX_TXN_BYTES
) -> list[Changes]:
    """``changes`` in order, cut into chunks of at most ``limit`` changes and ``max_bytes``
    bytes (a change larger than that alone)."""
    out: list[Changes] = []
    current: Changes = {}
    used = 0
    for key, value in changes.items():
        weight = len(key) + len(value or b"")
        if current and (len(current) >= limit or used + weight > max_bytes):
            out.append(current)
            current, used = {}, 0
        current[key] = value
        used += weight
    if current:
        out.append(current)
    return out


class FencedWriter:
    """Writes a pass's changes, by shard, fenced on each shard's epoch (see above)."""

    def __init__(self, store: EtcdStore, node: ClusterNode, lost: Callable[[int, str], None]):
        self.store = store
        self.node = node
        self._lost = lost  # a shard not served any more, and why (before anything is written)
        self.transactions = 0  # made so far, for tests and status
        # keys of the last ``write`` that etcd refused for their size (not written; their
        # shards still served): the caller takes back what it holds of them
        self.refused: set[bytes] = set()

    def _owner_key(self, shard: int) -> bytes:
        return f"{self.node.prefix}/shards/{shard}".encode()

    async def write(self, by_shard: Mapping[int, Changes]) -> bool:
        """Every shard's changes; False if one shard's could not all be kept (that shard
        is no longer served)."""
        self.refused = set()
        sizes = {shard: len(changes) for shard, changes in by_shard.items()}
        weights = {shard: size(changes) for shard, changes in by_shard.items()}
        calls = [
            self._write_large(group[0], by_shard[group[0]])
            if sizes[group[0]] > MAX_TXN_OPS or weights[group[0]] > MAX_TXN_BYTES
            else self._write_packed({shard: by_shard[shard] for shard in group})
            for group in pack(sizes, weights=weights)
        ]
        return all(await asyncio.gather(*calls))

    def _epochs(self, shards: list[int]) -> dict[int, int]:
        """The epochs of the shards still served (the others are dropped, and said so)."""
        epochs = {}
        for shard in shards:
            epoch = self.node.epoch(shard)
            if epoch is None:
                self._lost(shard, "a write for a shard no longer served")
            else:
                epochs[shard] = epoch
        return epochs

    async def _write_packed(self, changes: Mapping[int, Changes]) -> bool:
        """Shards of at most ``MAX_TXN_OPS`` changes in all, in one transaction."""
        epochs = self._epochs(sorted(changes))
        kept = len(epochs) == len(changes)
        renewed = False
        retries = 0
        while epochs:
            try:
                moved = await self._txn(epochs, changes)
            except Exception as exc:
                log.error("shard_write_failed", shards=sorted(epochs), error=type(exc).__name__)
                if renewed:
                    for shard, epoch in epochs.items():
                        self.node.depose(shard, f"a write failed: {type(exc).__name__}", epoch)
                    return False
                epochs, all_renewed = await self._renew(epochs)
                kept = kept and all_renewed
                renewed = True
                continue
            if not moved:
                return kept
            kept = False
            for shard in moved:
                why = f"etcd refused a write fenced on epoch {epochs[shard]}"
                self.node.depose(shard, why, epochs[shard])
                del epochs[shard]
            retries += 1
            if retries > COMPARE_RETRIES:
                for shard, epoch in epochs.items():
                    self.node.depose(shard, "its epoch was refused too often in one pass", epoch)
                return False
        return kept

    async def _txn(self, epochs: Mapping[int, int], changes: Mapping[int, Changes]) -> list[int]:
        """These shards' changes, in one transaction: the shards whose epoch moved on. One
        that etcd refuses for its size (nothing of it written) is made again a key at a
        time; a key etcd refuses alone is not written, and named in ``refused``."""
        try:
            return await self._txn_once(epochs, changes)
        except StoreRequestTooLargeError as exc:
            singles = [(s, key, value) for s in epochs for key, value in changes[s].items()]
            if len(singles) > 1:
                return await self._one_by_one(epochs, singles)
            shard, key, value = singles[0]
            self.refused.add(key)
            log.warning(
                "write_too_large",
                shard=shard,
                key=key.decode(errors="replace"),
                bytes=len(key) + len(value or b""),
                error=str(exc),
            )
            return []

    async def _one_by_one(
        self, epochs: Mapping[int, int], singles: list[tuple[int, bytes, bytes | None]]
    ) -> list[int]:
        moved: list[int] = []
        for shard, key, value in singles:
            if shard not in moved:
                moved += await self._txn({shard: epochs[shard]}, {shard: {key: value}})
        return moved

    async def _txn_once(
        self, epochs: Mapping[int, int], changes: Mapping[int, Changes]
    ) -> list[int]:
        owners = {self._owner_key(shard): shard for shard in epochs}
        puts: dict[bytes, bytes] = {}
        deletes: list[bytes] = []
        for shard in epochs:
            for key, value in changes[shard].items():
                if value is None:
                    deletes.append(key)
                else:
                    puts[key] = value
        self.transactions += 1
        fences = {key: epochs[shard] for key, shard in owners.items()}
        moved = await self.store.write_fenced_all(fences, puts, deletes)
        if any(key not in owners for key in moved):
            return list(epochs)  # an answer that names a key not ours: none is trusted
        return [owners[key] for key in moved]

    async def _renew(self, epochs: Mapping[int, int]) -> tuple[dict[int, int], bool]:
        """Each shard's epoch renewed (a write under the old one had an unknown outcome):
        the new epochs of those renewed, and whether all were (the others are not served)."""
        shards = list(epochs)
        renewed = await asyncio.gather(*(self.node.renew(s, epochs[s]) for s in shards))
        again = {s: e for s, e in zip(shards, renewed, strict=True) if e is not None}
        for shard in shards:
            if shard not in again:
                why = "a write failed and its epoch could not be renewed"
                self.node.depose(shard, why, epochs[shard])
        return again, len(again) == len(shards)

    async def _write_large(self, shard: int, changes: Changes) -> bool:
        """A shard with more changes than one transaction holds: in chunks, in turn, each
        fenced on its epoch (renewed once if a chunk's outcome is unknown)."""
        epoch = self.node.epoch(shard)
        if epoch is None:
            self._lost(shard, "a write for a shard no longer served")
            return False
        parts = chunks(changes)
        renewed = False
        i = 0
        while i < len(parts):
            chunk = parts[i]
            try:
                moved = await self._txn({shard: epoch}, {shard: chunk})
            except Exception as exc:
                log.error("shard_write_failed", shard=shard, error=type(exc).__name__)
                again = None if renewed else await self.node.renew(shard, epoch)
                if again is None:
                    self.node.depose(shard, f"a write failed: {type(exc).__name__}", epoch)
                    return False
                epoch, renewed = again, True
                continue
            if moved:
                self.node.depose(shard, f"etcd refused a write fenced on epoch {epoch}", epoch)
                return False
            i += 1
        return True
