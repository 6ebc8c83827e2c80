"""huddle's own ``Member(group_protocol="consumer")`` and the server's one consumer service:
a group its members formed is kept in the data dir like one Kafka clients formed (after a
restart its static members come back to their partitions, at the same group epoch), is
shown by ``huddle groups describe``, and a Kafka consumer and a huddle member in one group
share its partitions."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from huddle.cli import main
from huddle.client.member import Member
from huddle.coordinator.kafka.apis import Api
from huddle.coordinator.kafka.listener import listen_kafka
from huddle.protocol.embedded import TopicPartition
from tests.client.test_consumer_member import LONG_INTERVAL_MS, Recorder, _all, _topic
from tests.helpers import eventually, fast_server_config, running_server, wait_until
from tests.kafka.raw import RawKafka
from tests.kafka.test_consumer_protocol import _beat, _join, _owned, _owning


def _static(bootstrap: str, name: str, listener: Recorder) -> Member:
    return Member(
        bootstrap,
        group_id="g",
        topics=["t"],
        instance_id=f"i-{name}",
        client_id=f"huddle-{name}",
        listener=listener,
        group_protocol="consumer",
    )


async def _describe(port: int, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["groups", "describe", "g", "--json", "--bootstrap", f"127.0.0.1:{port}"]
    code = await asyncio.to_thread(main, argv, {})
    out, err = capsys.readouterr()
    assert code == 0, err
    view: dict[str, Any] = json.loads(out)
    return view


async def test_a_huddle_member_s_group_is_kept_across_a_restart_and_described(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], logs: object
) -> None:
    config = fast_server_config(
        data_dir=str(tmp_path),
        consumer_session_timeout_ms=2 * LONG_INTERVAL_MS,
        consumer_heartbeat_interval_ms=LONG_INTERVAL_MS,
    )
    ra, rb = Recorder(), Recorder()
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 4)
        async with _static(bootstrap, "a", ra) as a, _static(bootstrap, "b", rb) as b:
            await wait_until(
                lambda: a.assignment | b.assignment == _all(4) and len(a.assignment) == 2,
                what="a and b to own 2 each",
            )
            had = {"i-a": a.assignment, "i-b": b.assignment}
            view = await _describe(server.port, capsys)
            assert view["group_type"] == "consumer"
            epoch = view["group_epoch"]
            clients = {m["group_instance_id"]: m["client_id"] for m in view["members"]}
            assert clients == {"i-a": "huddle-a", "i-b": "huddle-b"}
        # static members leave for now (epoch -2): they keep their place and partitions
    async with running_server(config) as server:  # the same data dir
        view = await _describe(server.port, capsys)
        assert (view["group_type"], view["group_epoch"]) == ("consumer", epoch)
        kept = {m["group_instance_id"]: m for m in view["members"]}
        assert sorted(kept) == ["i-a", "i-b"]
        for instance_id, member in kept.items():
            assert member["member_epoch"] == -2
            owned = {TopicPartition(topic, p) for topic, p in member["owned"]}
            assert owned == had[instance_id]
        bootstrap = f"127.0.0.1:{server.port}"
        ra2, rb2 = Recorder(), Recorder()
        async with _static(bootstrap, "a", ra2) as a, _static(bootstrap, "b", rb2) as b:
            await wait_until(
                lambda: a.assignment == had["i-a"] and b.assignment == had["i-b"],
                what="a and b back to their own partitions",
            )
            group = server.consumer.core.groups["g"]
            assert group.group_epoch == epoch  # nothing moved: no rebalance for the restart
            assert ra2.revoked == rb2.revoked == ra2.lost == rb2.lost == []


async def test_a_kafka_consumer_and_a_huddle_member_share_one_group() -> None:
    config = fast_server_config(
        consumer_session_timeout_ms=2 * LONG_INTERVAL_MS,
        consumer_heartbeat_interval_ms=LONG_INTERVAL_MS,
    )
    async with running_server(config) as server:
        wire = await listen_kafka(server, "127.0.0.1", 0)
        bootstrap = f"127.0.0.1:{server.port}"
        await _topic(bootstrap, 4)
        t_id = server.core.topics.ids["t"]
        member = Member(bootstrap, group_id="g", topics=["t"], group_protocol="consumer")
        async with member as h, RawKafka(wire.port) as kafka:
            await wait_until(lambda: h.assignment == _all(4), what="h to own all four")
            k_id = str(uuid.uuid4())
            joined = await kafka.call(Api.CONSUMER_GROUP_HEARTBEAT, 1, 1, **_join(k_id, "t"))
            epoch, mine = joined.member_epoch, _owned(joined, t_id)
            assert mine == set()  # h owns them all until it released its share
            correlation = 2

            async def heartbeat() -> None:
                nonlocal epoch, mine, correlation
                owning = _owning(t_id, mine)
                answer = await kafka.call(
                    Api.CONSUMER_GROUP_HEARTBEAT,
                    1,
                    correlation,
                    **_beat(k_id, epoch, topic_partitions=owning),
                )
                correlation += 1
                assert answer.error_code == 0
                epoch = answer.member_epoch
                if answer.assignment is not None:
                    mine = _owned(answer, t_id)
                theirs = {tp.partition for tp in h.assignment}
                assert not mine & theirs  # never both owners of a partition

            async def shared() -> bool:
                await heartbeat()  # the Kafka client has no notice: it asks
                return len(mine) == 2 and len(h.assignment) == 2

            await eventually(shared, wait_s=10, what="the two to share the partitions")
            assert mine | {tp.partition for tp in h.assignment} == {0, 1, 2, 3}
            group = server.consumer.core.groups["g"]
            assert set(group.members) == {h.member_id, k_id}
