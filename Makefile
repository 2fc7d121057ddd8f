# Forge: `make run` serves the app, `make test` runs the whole suite.
# Both start from a fresh clone with only Python 3.11+ and make.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-js node-deps lint format migrate clean bench cluster cluster-stop cluster-status

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installed once per change of pyproject.toml; the stamps record what is installed.
$(VENV)/.run-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.dev-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@ $(VENV)/.run-deps

var:
	mkdir -p var

run: $(VENV)/.run-deps | var
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py recover_sessions --quiet
	$(BIN)/python manage.py setup_demo --host $(HOST) --port $(PORT)
	$(BIN)/daphne -b $(HOST) -p $(PORT) forge.asgi:application

# nginx in front of CLUSTER_DAPHNES (3) daphnes, Redis shards and a PostgreSQL primary
# with a streaming replica, all on 127.0.0.1 and under var/cluster/ (cluster/cluster.py;
# docs/deploy.md). Needs Debian's nginx, redis-server and postgresql packages.
cluster: $(VENV)/.run-deps
	$(BIN)/python cluster/cluster.py up

cluster-stop:
	@if [ -x $(BIN)/python ]; then $(BIN)/python cluster/cluster.py down; \
	else $(PYTHON) cluster/cluster.py down; fi

cluster-status:
	$(BIN)/python cluster/cluster.py status

lint: $(VENV)/.dev-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports

format: $(VENV)/.dev-deps
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite runs twice: the embedded stack (SQLite + in-memory channel layer)
# and the server stack (PostgreSQL + Redis from FORGE_TEST_DATABASE_URL and
# FORGE_TEST_REDIS_URL). Without those variables the server pass is skipped
# with a notice, except under CI=true, where it fails.
#
# With the server stack configured the passes run side by side (tests/run_passes.py):
# TEST_PASSES=split (the default) runs each stack's suite in two halves, four pytest
# processes; parallel, one process per stack; sequential, one pass after the other.
# They share no state (temporary SQLite files and the in-memory layer; a database of
# their own and a key prefix per process in PostgreSQL and Redis; free ports for the
# processes they start), and much of each is waiting on the servers, browsers and
# daphnes it starts. One pass prints as it goes; the others' output follows it, from
# var/test-*.log. Any pass failing fails the target.
TEST_PASSES ?= split

test: lint test-js node-deps | var
	@$(BIN)/python tests/run_passes.py $(TEST_PASSES) $(PYTEST_ARGS)

# The chat page's pure state logic (static/forge/sessionlog.js) under Node's own test
# runner. Without Node it is skipped with a notice, except under CI=true.
test-js:
	@if command -v node >/dev/null 2>&1; then node --test tests/js/; \
	elif [ "$$CI" = "true" ]; then echo "node is required for tests/js under CI" >&2; exit 1; \
	else echo "node not found: skipping tests/js (install Node 20+ to run them)"; fi

# The npm packages the tests run (package.json devDependencies: the MCP server
# tests/tools/mcp/ talks to). Without Node they are skipped with a notice, except
# under CI=true, where it fails.
node-deps:
	@if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund --silent; \
	elif [ "$$CI" = "true" ]; then echo "node and npm are required for tests/tools/mcp under CI" >&2; exit 1; \
	else echo "npm not found: skipping the npm test dependencies (install Node 20+ to run them)"; fi

bench: $(VENV)/.dev-deps
	$(BIN)/python bench/append.py
	$(BIN)/python bench/stream.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache *.egg-info
