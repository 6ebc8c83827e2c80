"""The cluster's store primitives against a real etcd: claims, epochs and fenced writes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest
from huddle.testing import free_port

from huddle.coordinator.cluster.store import EtcdStore, StoreUnavailableError, parse_endpoints
from tests.etcd import Etcd, etcd

__all__ = ["etcd"]  # the fixture

SHARD = b"/huddle/test/shards/0"


@pytest.fixture
async def store(etcd: Etcd) -> AsyncIterator[EtcdStore]:
    connected = await EtcdStore.connect([etcd.endpoint])
    try:
        yield connected
    finally:
        await connected.close()


async def test_a_claim_is_exclusive_and_its_revision_is_the_epoch(store: EtcdStore) -> None:
    lease = await store.grant(5)
    epoch = await store.claim(SHARD, b"node-1", lease)
    assert epoch is not None
    other = await store.grant(5)
    assert await store.claim(SHARD, b"node-2", other) is None  # held
    entry = await store.get(SHARD)
    assert entry is not None
    assert (entry.value, entry.revision, entry.lease) == (b"node-1", epoch, lease.id)


async def test_a_deposed_owners_fenced_write_changes_nothing(store: EtcdStore) -> None:
    offsets = b"/huddle/test/offsets/g"
    first = await store.grant(1)
    old_epoch = await store.claim(SHARD, b"node-1", first)
    assert old_epoch is not None
    assert await store.write_fenced(SHARD, old_epoch, {offsets: b"10"})
    deadline = time.monotonic() + 10
    while await store.get(SHARD) is not None:  # its lease runs out: the claim is gone
        assert time.monotonic() < deadline, "the lease did not expire"
        await anyio.sleep(0.05)
    new_epoch = await store.claim(SHARD, b"node-2", await store.grant(5))
    assert new_epoch is not None
    assert new_epoch > old_epoch
    assert not await store.write_fenced(SHARD, old_epoch, {offsets: b"99"})
    assert await store.write_fenced(SHARD, new_epoch, {offsets: b"11"})
    found = await store.get_prefix(b"/huddle/test/offsets/")
    assert {k: e.value for k, e in found.items()} == {offsets: b"11"}


async def test_an_unreachable_store_is_a_clear_error(etcd: Etcd) -> None:
    dead = ("127.0.0.1", free_port())
    with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{dead[1]}"):
        await EtcdStore.connect([dead], timeout_s=1)
    store = await EtcdStore.connect([dead, etcd.endpoint], timeout_s=1)  # the next one
    try:
        assert store.endpoint == etcd.endpoint
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("etcd://h1:2379,h2:2380", [("h1", 2379), ("h2", 2380)]),
        ("127.0.0.1:2379", [("127.0.0.1", 2379)]),
        ("etcd://[::1]:2379", [("::1", 2379)]),
    ],
)
def test_endpoints_parse(spec: str, expected: list[tuple[str, int]]) -> None:
    assert parse_endpoints(spec) == expected


@pytest.mark.parametrize("spec", ["etcd://h1", "h1:0", "h1:port", ":2379", "h1:2379,"])
def test_bad_endpoints_are_refused_with_the_culprit(spec: str) -> None:
    with pytest.raises(ValueError, match="not an etcd endpoint"):
        parse_endpoints(spec)
