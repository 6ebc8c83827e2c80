"""Topic ids: the random UUID each topic gets when it is created (Kafka's KIP-516).

A topic's name can come back (deleted, then created again) while clients still hold the old
one's offsets or positions; its id cannot: every creation draws a new one, kept with the
topic (the data dir's ``TopicRecord``, a cluster's etcd records) and never changed after.

- ``new_topic_id``: a random UUID (version 4), drawn again while it would be one Kafka
  reserves or avoids (``Uuid.randomUuid``): the zero UUID and the one of ``0, 1`` (a version
  4 UUID is neither), and one whose text starts with ``-`` (command lines take it for an
  option);
- ``kafka_text``: the id as Kafka writes it (URL-safe base64, no padding: 22 characters),
  for logs and the command line;
- ``derived_topic_id``: the id of a topic created before ids were kept (a cluster's etcd
  records written by an older version): made from the topic's name and the etcd revision it
  was created at, so every node derives the same one, a restart or a failover keeps it, and
  the topic deleted and created again gets another.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Callable
from typing import Final

ZERO: Final = uuid.UUID(int=0)
NewTopicId = Callable[[], uuid.UUID]


def kafka_text(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def new_topic_id() -> uuid.UUID:
    while True:
        drawn = uuid.uuid4()
        if drawn.int > 1 and not kafka_text(drawn).startswith("-"):
            return drawn


def derived_topic_id(name: str, created: int) -> uuid.UUID:
    digest = hashlib.blake2b(f"{created}/{name}".encode(), digest_size=16).digest()
    derived = uuid.UUID(bytes=digest, version=4)
    if kafka_text(derived).startswith("-"):  # as ``new_topic_id`` avoids, one bit flipped
        derived = uuid.UUID(int=derived.int ^ (1 << 122), version=4)
    return derived
