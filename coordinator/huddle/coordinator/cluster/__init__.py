"""A coordinator cluster on etcd: groups sharded over nodes (building blocks so far)."""
