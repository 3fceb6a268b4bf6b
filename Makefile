# One-command set-up: every target below creates the virtual environment, installs the
# project and fetches the broker jars as needed, on a fresh machine.

PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
SHARED ?= ../shared
PYTEST_ARGS ?=

.PHONY: help venv broker-jars compile test test-pure test-fast protocol-check lint typecheck demo dev-broker bench docs dist clean

help:
	@echo "make test        set up everything and run the whole test suite (real Kafka broker)"
	@echo "make test-fast   the unit tier (-m 'not broker'): no Java, no broker jars"
	@echo "make demo        produce and consume through a local broker (BOOTSTRAP=host:port for a cluster)"
	@echo "make dev-broker  run a local Kafka broker until Ctrl-C (BROKERS=3 for three)"
	@echo "make bench       benchmarks against the peers, same broker, one run"
	@echo "make dist        the sdist and the wheel in dist/ (python -m build), checked by twine"
	@echo "make lint typecheck docs clean"

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python >= 3.11"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python >= 3.11 needed, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	AIOSTREAM_KAFKA_PURE=1 $(PY) -m pip install --quiet -e '.[dev]'
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

# The compiled build of the hot modules (aiostream_kafka/_native.py lists them), in place:
# extension modules beside their sources, rebuilt when a source is newer. Without a C
# compiler it warns and the pure package runs.
HOT_SOURCES = $(shell $(PYTHON) -c "import ast,pathlib;t=ast.parse(pathlib.Path('aiostream_kafka/_native.py').read_text());print(' '.join(m.replace('.','/')+'.py' for n in t.body if getattr(getattr(n,'target',None),'id','')=='COMPILED_MODULES' for m in ast.literal_eval(n.value)))")
COMPILED_STAMP = build/.compiled

$(COMPILED_STAMP): $(STAMP) $(HOT_SOURCES) aiostream_kafka/_native.py setup.py
	$(PY) setup.py --quiet build_ext --inplace
	@# build_ext copies with the build's old times: newer than the sources, or the import
	@# guard (_native) takes them for stale.
	@find aiostream_kafka -name '*.so' -exec touch {} +
	@mkdir -p build && touch $(COMPILED_STAMP)

compile: $(COMPILED_STAMP)

# The whole suite on the compiled build, then the codec and the producer/consumer unit
# tests on the pure package (the same source, interpreted).
test: $(STAMP) compile broker-jars protocol-check
	AIOSTREAM_KAFKA_EXPECT_COMPILED=1 $(PY) -m pytest -ra $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-pure

test-pure: $(STAMP)
	AIOSTREAM_KAFKA_PURE=1 $(PY) -m pytest -ra -q -p no:cacheprovider tests/protocol tests/test_partitioner.py tests/test_producer.py tests/test_consumer.py

# The unit tier: every test not marked `broker` (tests/conftest.py marks those that request
# a broker or a JVM), without Java and without the broker jars; a broker start in this run
# fails the test that tried it (AIOSTREAM_KAFKA_NO_BROKER).
test-fast: $(STAMP)
	AIOSTREAM_KAFKA_NO_BROKER=1 $(PY) -m pytest -ra -n 2 -m "not broker and not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check aiostream_kafka tests tools benchmarks examples
	$(VENV)/bin/ruff format --check aiostream_kafka tests tools benchmarks examples setup.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

demo: $(STAMP)
	$(PY) examples/demo.py $(if $(BOOTSTRAP),--bootstrap-servers $(BOOTSTRAP),)

dev-broker: $(STAMP)
	$(VENV)/bin/aiostream-kafka dev-broker --brokers $(or $(BROKERS),1)

bench: $(STAMP) compile broker-jars
	$(PY) -m benchmarks

# The docs extra comes with the dev one ($(STAMP)). NO_MKDOCS_2_WARNING: mkdocs-material
# (9.8.2 here) prints an end-of-life notice of itself on every build unless it is set.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# What a release publishes: the sdist, and the wheel built from it (compiled where a C
# compiler is; AIOSTREAM_KAFKA_PURE=1 for the pure one), in an isolated build environment;
# twine checks the metadata PyPI will read; the wheel is installed into a fresh venv and
# imported from outside the checkout (tools/check_installed.py: runs compiled if built so).
DIST_CHECK = build/dist-check
dist: $(STAMP)
	rm -rf dist $(DIST_CHECK)
	$(PY) -m build --outdir dist
	$(VENV)/bin/twine check --strict dist/*
	$(PYTHON) -m venv $(DIST_CHECK)
	$(DIST_CHECK)/bin/python -m pip install --quiet dist/*.whl
	cd $(DIST_CHECK) && bin/python $(CURDIR)/tools/check_installed.py \
		"$$($(CURDIR)/$(PY) -c 'import aiostream_kafka; print(aiostream_kafka.__version__)')"

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find aiostream_kafka -name "*.so" -delete; rm -f *__mypyc*.so
