"""The APIs and versions the Kafka listener serves, which ApiVersions advertises: exactly
these, nothing more (a client picks the highest version both sides know, and trusts it).

The ranges are chosen so that every listed client finds what it needs:

- librdkafka up to 2.11 (kcat 1.7.1 on Debian is 2.0.2) turns a feature on only when one
  exact version is inside the range: Produce 3 and Fetch 4 for the v2 message format;
  FindCoordinator 0, OffsetCommit 1-2, OffsetFetch 1, JoinGroup 0, SyncGroup 0,
  Heartbeat 0, LeaveGroup 0 for its classic consumer. So the group APIs start at 0, and
  the others at the oldest version Kafka 4 still defines (OffsetCommit 2, OffsetFetch 1,
  CreateTopics 2, DeleteTopics 1, ListOffsets 1, Fetch 4).
- kafkajs is never flexible (ApiVersions up to 2, Metadata up to 6, JoinGroup up to 5 ...),
  kafka-python and aiokafka take the highest version they know: every version up to the
  newest of each API is served.
- Produce 3-9, Fetch 4-18 and ListOffsets 1-9 are the log's (``kafka_log.handlers``;
  Fetch 13+ names topics by id: ``by_id``); Metadata answers topic ids from v10 and
  finds topics by id in v12; OffsetCommit 10 and OffsetFetch 10 name topics by id;
  SaslHandshake is advertised 0-1 (librdkafka's SASL handshake feature needs v0 in the
  range) but a v0 one is refused (``kafka.sasl``): its token exchange without Kafka's
  header is not served, and every listed client sends v1;
  ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0-1 are the consumer group
  protocol's (``consumer_groups``, ``consumer_describe``); GetTelemetrySubscriptions,
  InitProducerId and the transaction APIs are not served, so not advertised.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from huddle.coordinator.kafka.by_id import FETCH_BY_ID_VERSIONS
from huddle.coordinator.kafka_log.handlers import (
    FETCH_VERSIONS,
    LIST_OFFSETS_VERSIONS,
    PRODUCE_VERSIONS,
)


class Api(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# (lowest, highest) version served, by API.
SERVED: Final[dict[Api, tuple[int, int]]] = {
    Api.PRODUCE: (PRODUCE_VERSIONS[0], PRODUCE_VERSIONS[-1]),  # the log's
    Api.FETCH: (FETCH_VERSIONS[0], FETCH_BY_ID_VERSIONS[-1]),  # 13+: ``by_id``
    Api.LIST_OFFSETS: (LIST_OFFSETS_VERSIONS[0], LIST_OFFSETS_VERSIONS[-1]),
    Api.METADATA: (0, 12),
    Api.OFFSET_COMMIT: (2, 10),  # 10: topics by id
    Api.OFFSET_FETCH: (1, 10),  # 10: topics by id
    Api.FIND_COORDINATOR: (0, 6),
    Api.JOIN_GROUP: (0, 9),
    Api.HEARTBEAT: (0, 4),
    Api.LEAVE_GROUP: (0, 5),
    Api.SYNC_GROUP: (0, 5),
    Api.DESCRIBE_GROUPS: (0, 5),
    Api.LIST_GROUPS: (0, 5),
    Api.SASL_HANDSHAKE: (0, 1),  # v0 answered UNSUPPORTED_VERSION (``kafka.sasl``)
    Api.API_VERSIONS: (0, 4),
    Api.CREATE_TOPICS: (2, 7),
    Api.DELETE_TOPICS: (1, 6),
    Api.SASL_AUTHENTICATE: (0, 2),
    Api.CREATE_PARTITIONS: (0, 3),
    Api.DELETE_GROUPS: (0, 2),
    Api.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848: ``consumer_groups``
    Api.CONSUMER_GROUP_DESCRIBE: (0, 1),  # KIP-848: ``consumer_describe``
}


def served(api_key: int, version: int) -> bool:
    span = SERVED.get(api_key)  # type: ignore[call-overload]
    return span is not None and span[0] <= version <= span[1]


def name(api_key: int) -> str:
    try:
        return Api(api_key).name
    except ValueError:
        return f"API {api_key}"
