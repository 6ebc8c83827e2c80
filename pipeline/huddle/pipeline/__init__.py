"""PySpark jobs that turn chaos event logs into availability and safety figures."""
