"""The Kafka listener: Kafka's wire over the same core, a second ``Wire`` of the server.

``wire.KafkaWire`` plugs into ``CoordinatorServer.listen``; the modules here hold, each,
one part of what it does (see docs/kafka.md for the mapping to the core):

- ``framing``: the 4-byte size prefix, the size limit;
- ``header``: the request header (v1 or v2 by API and version), the client id;
- ``apis``: which APIs and versions are served, and so advertised;
- ``schemas``: kio, Kafka's schemas for every API and version (the only module that
  touches it): decoding requests, building and encoding responses for their version;
- ``walk``: a request walked by its schema before kio reads it: lengths and nulls checked
  as Kafka checks them, unknown tagged fields skipped as Kafka skips them;
- ``heartbeat_fast``: Heartbeat requests read and answered by hand, kio's bytes exactly
  (a member's most frequent request; what it cannot read plainly goes through kio);
- ``offset_commit_encoding``: OffsetCommit answers written by hand, kio's bytes exactly;
- ``answers``: each connection's answers leaving in request order (``KafkaCodec``);
- ``brokers``: ApiVersions, Metadata and FindCoordinator;
- ``groups``, ``offsets``, ``admin``: Kafka's requests as the core's, its answers back;
- ``log_apis``: Produce, Fetch and ListOffsets over the small log
  (``huddle.coordinator.kafka_log``).
"""
