# Every target does its own set-up: a virtualenv in .venv, the package with its test and dev
# extras, and the Kafka/ZooKeeper jars (cached under ~/.cache/aiozkconsumer or
# $AIOZKCONSUMER_CACHE).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup jars demo test unit lint docs check clean

$(STAMP): pyproject.toml setup.py aiozkconsumer/kafka/_native.c aiozkconsumer/_handout.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

setup: $(STAMP)

jars: $(STAMP)
	$(PY) -m aiozkconsumer.testing.provision --flavour all
	$(PY) -m aiozkconsumer.testing.schema_registry

demo: jars
	$(VENV)/bin/aiozkconsumer demo

# Two workers, each test file on one of them (its module clusters and fixtures stay whole;
# each worker starts the session clusters it needs): most of a test's time is waiting on
# servers, so two at a time roughly halve the wall time on two cores.
test: jars
	$(VENV)/bin/pytest -n 2 --dist loadfile

unit: $(STAMP)
	$(VENV)/bin/pytest -m "not integration"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

docs: $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

check: lint test

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
