"""Consumer drivers for real Kafka clients: one small program per client that joins a
group and reports what happens to it, for the Kafka-wire tests, ``bench.kafka_clients`` and
the chaos harness.

Every driver takes the same options (``huddle.chaos.kafka_workers.options``) and prints one
JSON object per line on stdout (``huddle.chaos.kafka_workers.emit``):

- ``started``: the client is configured and about to subscribe (its imports are done);
- ``joined``: a new generation, with ``member_id`` and ``generation`` where the client
  tells them (``null`` where it does not);
- ``assigned`` / ``revoked`` / ``lost``: ``partitions`` added or taken away, as
  ``[topic, partition]`` pairs, and ``owned``: every partition the member holds after the
  change (an eager client revokes all, then is assigned all);
- ``consumed``: the first record the member read from a partition since it was assigned
  (``offset``): where it resumed;
- ``committed``: ``offsets`` (``[topic, partition, offset]`` triples) it committed, or
  ``error``;
- ``left``: the consumer closed after SIGTERM or SIGINT (it left the group, unless it is a
  static member, which Kafka keeps until its session times out); the process then exits 0;
- ``error``: something failed, with ``message``; the driver goes on unless it exits.

Each line carries ``client`` (the driver's name), ``pid``, ``mono`` (``CLOCK_MONOTONIC``
seconds, comparable between processes on one machine: what the tests and the benchmark time
with) and ``ts`` (wall-clock seconds). ``launch`` builds each driver's command line.
"""
