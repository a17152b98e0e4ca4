# Two commands matter on a fresh Debian machine: `make run` and `make test` (see README.md).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup images run test bench lint typecheck unit clean-test

setup:  ## install Debian packages, start dockerd, make the venv, build the images (idempotent)
	bash scripts/setup.sh

images: setup

run: setup  ## set up whatever is missing, then start the control plane
	$(VENV)/bin/sandbox server

lint:
	$(VENV)/bin/ruff check --output-format concise sandbox tests $(wildcard bench)
	$(VENV)/bin/ruff format --check sandbox tests $(wildcard bench)
	$(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/check_module_size.py

typecheck:
	$(VENV)/bin/mypy

test: setup  ## set up whatever is missing, then lint, type-check and run every test against the real engine
	$(MAKE) --no-print-directory lint typecheck
	bash scripts/test.sh $(PYTEST_ARGS)

bench: setup  ## set up whatever is missing, then benchmark against the docker CLI (BENCH_ARGS=--quick: a smoke run)
	$(PY) -m bench $(BENCH_ARGS)

unit:
	$(PY) -m pytest tests/unit -q
