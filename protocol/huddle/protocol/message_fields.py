"""The ground the wire's messages stand on: ``Message``, the tagged base of every frame
body; the protocol version; the bounds on the names and ids a client sends, and the
annotated field types that carry them (a frame over a bound is INVALID_REQUEST, naming the
field). Every name here is importable from ``huddle.protocol.messages`` too.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

PROTOCOL_VERSION = 2  # 2: the consumer group protocol (``consumer_messages``)
SUPPORTED_VERSIONS: tuple[int, ...] = (1, 2)
NO_GENERATION = -1

# Bounds on the names and ids a client sends (a frame over them is INVALID_REQUEST, naming
# the field). Kafka's own: 249 characters for topic names and group instance ids; the others
# are bounded so that an id copied into member ids, answers and log lines stays small.
MAX_GROUP_ID = 255
MAX_CLIENT_ID = 255
MAX_MEMBER_ID = 512  # generated ones are the client id, "-", and a UUID
MAX_INSTANCE_ID = 249
MAX_PROTOCOL_NAME = 255  # protocol types and embedded protocol names
MAX_REASON = 255
MAX_TOPIC_NAME_ON_WIRE = 1_024  # a topic name over 249 is refused per topic, saying why
MIN_INCARNATION, MAX_INCARNATION = 16, 64  # bytes of a Handshake's incarnation token
# The longest a coordinator holds back its answer to a SASL login (a success's too) after
# failed logins from the client's address group: a client logging in waits longer for it.
MAX_LOGIN_HOLD_S = 5.0

GroupId = Annotated[str, Meta(max_length=MAX_GROUP_ID)]
ClientId = Annotated[str, Meta(max_length=MAX_CLIENT_ID)]
MemberId = Annotated[str, Meta(max_length=MAX_MEMBER_ID)]
InstanceId = Annotated[str, Meta(max_length=MAX_INSTANCE_ID)]
ProtocolName = Annotated[str, Meta(max_length=MAX_PROTOCOL_NAME)]
Reason = Annotated[str, Meta(max_length=MAX_REASON)]
TopicName = Annotated[str, Meta(max_length=MAX_TOPIC_NAME_ON_WIRE)]
Incarnation = Annotated[bytes, Meta(min_length=MIN_INCARNATION, max_length=MAX_INCARNATION)]
MAX_ITEMS = 1_000  # topics, groups or members one admin or leave request may name
MAX_PROTOCOLS = 64  # embedded protocols one JoinGroup may offer


class Message(Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every tagged message; the tag is the snake_case message name."""
