# One-command set-up: every target below creates the virtual environment, installs the
# project and fetches the broker jars as needed, on a fresh machine.

PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
SHARED ?= ../shared
PYTEST_ARGS ?=

.PHONY: help venv broker-jars test test-fast protocol-check lint typecheck demo dev-broker bench docs clean

help:
	@echo "make test        set up everything and run the whole test suite (real Kafka broker)"
	@echo "make demo        produce and consume through a local broker (BOOTSTRAP=host:port for a cluster)"
	@echo "make dev-broker  run a local Kafka broker until Ctrl-C (BROKERS=3 for three)"
	@echo "make bench       benchmarks against the peers, same broker, one run"
	@echo "make lint typecheck docs clean"

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python >= 3.11"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python >= 3.11 needed, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

broker-jars: $(STAMP)
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then \
		$(PY) -c 'from aiostream_kafka.testing.jars import ensure_kafka_jars as e; print("Kafka jars:", e())'; \
	fi

protocol-check: $(STAMP)
	@if [ -f tools/generate_protocol.py ] && [ -d $(SHARED)/kafka-protocol/messages ]; then \
		$(PY) tools/generate_protocol.py --check; \
	else echo "protocol-check: $(SHARED)/kafka-protocol not present, skipped"; fi

test: $(STAMP) broker-jars protocol-check
	$(PY) -m pytest -ra $(PYTEST_ARGS)

test-fast: $(STAMP) broker-jars
	$(PY) -m pytest -ra -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check aiostream_kafka tests tools benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

demo: $(STAMP)
	$(PY) examples/demo.py $(if $(BOOTSTRAP),--bootstrap-servers $(BOOTSTRAP),)

dev-broker: $(STAMP)
	$(VENV)/bin/aiostream-kafka dev-broker --brokers $(or $(BROKERS),1)

bench: $(STAMP) broker-jars
	$(PY) -m benchmarks

docs: $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .mypy_cache .ruff_cache
