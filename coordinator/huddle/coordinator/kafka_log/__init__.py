"""The Kafka wire's small log: record batches per topic partition, in memory, for Produce,
Fetch and ListOffsets (docs/kafka.md, "The log")."""
