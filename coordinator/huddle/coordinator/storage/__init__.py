"""The data dir: what a coordinator keeps on disk, and how.

- ``records``: the kept values (topics, offsets, groups) and their msgpack encoding;
- ``journal``: the append-only journal file, its checks on open, and its compaction;
- ``writer``: the journal's writes off the event loop;
- ``batching``: the end-of-pass hook that gathers one batch per loop pass;
- ``group_commit``: changes of many requests kept in one write, answers held until then;
- ``kept_groups``: groups kept across a restart (their members, in their generation);
- ``salvage``: reading what can be read from a damaged journal (``huddle data``).
"""
