"""The coordinator reads the subscribed topics of a ``consumer`` group's members (for
offset retention) from Kafka clients' subscriptions as well as from huddle's."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.serial import entity_writer
from kio.static.primitive import i32

from huddle.protocol.embedded import (
    EmbeddedSchemaError,
    Subscription,
    encode,
    subscribed_topics,
)


def _kafka(version: int, subscription: SubscriptionV0 | SubscriptionV3) -> bytes:
    """As Kafka's ConsumerProtocol writes it: the version, then the struct."""
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(type(subscription))(buffer, subscription)
    return buffer.getvalue()


def test_a_kafka_client_s_subscription_is_read() -> None:
    v0 = SubscriptionV0(topics=("orders", "clicks"), user_data=None)
    v3 = SubscriptionV3(
        topics=("orders",), user_data=b"x", owned_partitions=(), generation_id=i32(3), rack_id="r"
    )
    assert subscribed_topics(_kafka(0, v0)) == ["orders", "clicks"]
    assert subscribed_topics(_kafka(3, v3)) == ["orders"]


def test_huddle_s_subscription_is_read_as_before() -> None:
    assert subscribed_topics(encode(Subscription(topics=["a", "b"]))) == ["a", "b"]


@pytest.mark.parametrize(
    "data",
    [b"\x00\x00\x00\x00\x00\x05\x00\x01t", b"\x00\x00\x00\x00\x00\x01\x00\x09t", b"\x00\x01"],
)
def test_a_truncated_kafka_subscription_is_refused(data: bytes) -> None:
    with pytest.raises(EmbeddedSchemaError):
        subscribed_topics(data)
