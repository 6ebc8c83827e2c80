# The first two targets are the README's set-up commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# huddle is installed editable in setuptools' strict mode (a tree of links to the sources, on a
# static path entry: no import hook, so mypy and other static tools resolve `huddle.*`). A module
# added or removed changes its folder, which re-links the tree.
PACKAGE_DIRS := $(wildcard */huddle/*/ */huddle/*/*/ */huddle/*/*/*/ cli/huddle/)
# The fast tier runs on pytest-xdist workers: most of its tests wait on sockets, timers and
# child processes rather than the CPU, so four of them keep two cores busy (`make check
# WORKERS=` runs it in one process). The tests that assert a wall-clock bound (`timing`),
# the e2e and the PySpark ones then run one at a time: their timings want the machine (a
# latency bound, a cluster, a chaos campaign, a JVM).
WORKERS ?= -n 4
ON_WORKERS := -m "not e2e and not spark and not timing"
# The real Kafka clients' e2e tests (`clients`) wait on the clients' heartbeats and session
# timeouts, not on the CPU: three run at a time.
CLIENT_WORKERS ?= -n 3

# kafkajs for the Kafka-client tests, pinned by tests/kafka_clients/js/package-lock.json
# (npm ci); without npm the kafkajs tests skip and say why.
KAFKAJS_DIR := tests/kafka_clients/js
KAFKAJS := $(KAFKAJS_DIR)/node_modules/.installed

.PHONY: run serve test check lint bench clean kafkajs

# The demo: stateful runs (rolling bounce, scale-up, process death) per protocol, and the report.
run: $(STAMP)
	$(BIN)/huddle demo

serve: $(STAMP)
	$(BIN)/huddle serve

test: $(STAMP) $(KAFKAJS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q $(WORKERS) $(ON_WORKERS)
	$(BIN)/pytest -q $(CLIENT_WORKERS) -m "clients"
	$(BIN)/pytest -q -m "(timing or e2e or spark) and not clients" --durations=20

# The fast tier: everything but real processes and PySpark (`make test` runs those too).
check: $(STAMP) $(KAFKAJS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q $(WORKERS) $(ON_WORKERS)
	$(BIN)/pytest -q -m "timing and not e2e and not spark"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m bench.heartbeat
	$(BIN)/python -m bench.rebalance
	$(BIN)/python -m bench.memory
	$(BIN)/python -m bench.members
	$(BIN)/python -m bench.assignors
	$(BIN)/python -m bench.journal
	$(BIN)/python -m bench.restart_load
	$(BIN)/python -m bench.fairness
	$(BIN)/python -m bench.fuzz
	$(BIN)/python -m bench.fuzz --wire kafka
	$(BIN)/python -m bench.chaos
	$(BIN)/python -m bench.pipeline
	$(BIN)/python -m bench.failover
	$(BIN)/python -m bench.cluster
	$(BIN)/python -m bench.etcd_txns
	$(BIN)/python -m bench.security
	$(BIN)/python -m bench.metrics

$(STAMP): pyproject.toml $(PACKAGE_DIRS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP)

kafkajs: $(KAFKAJS)

$(KAFKAJS): $(KAFKAJS_DIR)/package.json $(KAFKAJS_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(KAFKAJS_DIR) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else \
		echo "npm is not installed (apt-get install nodejs npm): the kafkajs tests will skip"; \
	fi

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache .hypothesis $(KAFKAJS_DIR)/node_modules
