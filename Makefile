# Two commands matter on a fresh Debian machine: `make run` and `make test` (see README.md).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
BENCH_ARGS ?=
DEMO_ARGS ?=
SOAK_SANDBOXES ?= 8
SOAK_MINUTES ?= 5
RUN_HTTP := http://127.0.0.1:8080

.PHONY: setup images run test bench lint typecheck unit clean-test push soak

setup:  ## install Debian packages, start dockerd, make the venv, build the images (idempotent)
	bash scripts/setup.sh

images: setup

# The control plane runs in a process group of its own (set -m): Ctrl-C (or a closed terminal) reaches `sandbox demo
# live`, which deletes its sandboxes through the control plane, and then the EXIT trap stops the control plane.
run: setup  ## set up, start the control plane, run the demo against it, keep 3 sandboxes live in the web view until Ctrl-C
	@set -uo pipefail; \
	log=$${TMPDIR:-/tmp}/sandbox-server.log; \
	set -m; $(VENV)/bin/sandbox server --log-format text >"$$log" 2>&1 & pid=$$!; set +m; \
	trap 'kill -TERM $$pid 2>/dev/null; wait $$pid 2>/dev/null; echo "==> control plane stopped"' EXIT; \
	trap 'exit 130' INT TERM HUP; \
	up() { $(PY) -c 'import sys, httpx; sys.exit(httpx.get(sys.argv[1], timeout=1).status_code != 200)' \
	    "$(RUN_HTTP)/healthz" 2>/dev/null; }; \
	for i in $$(seq 120); do up && break; kill -0 $$pid 2>/dev/null || break; sleep 0.5; done; \
	up || { tail -n 30 "$$log" >&2; echo "make run: the control plane did not come up (log: $$log)" >&2; exit 1; }; \
	echo "==> control plane up (pid $$pid, gRPC 127.0.0.1:50051, log $$log)"; \
	echo "==> web view: $(RUN_HTTP)/view   (open it to watch the rollouts)"; \
	$(VENV)/bin/sandbox demo $(DEMO_ARGS) || echo "==> demo: some episodes failed (see above)"; \
	cli=$$(bash scripts/link_cli.sh --how); \
	echo "==> CLI: $$cli ls, $$cli shot <id> -o screen.png, $$cli --help"; \
	echo "==> serving: web view $(RUN_HTTP)/view, REST $(RUN_HTTP)/docs, gRPC 127.0.0.1:50051; Ctrl-C stops it"; \
	$(VENV)/bin/sandbox demo live --view "$(RUN_HTTP)/view" || echo "==> no live sandboxes (see above)"; \
	wait $$pid

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

soak: setup  ## N sandboxes stepping for M minutes through a real server: make soak SOAK_SANDBOXES=8 SOAK_MINUTES=5
	SANDBOX_SOAK=1 SOAK_SANDBOXES=$(SOAK_SANDBOXES) SOAK_MINUTES=$(SOAK_MINUTES) bash scripts/test.sh tests/soak -s $(PYTEST_ARGS)

push:  ## set up, build (cached), push every image (control plane too) as :<hash>, :latest, :<version> (the chart's tag): make push REGISTRY=host:port
	@test -n "$(REGISTRY)" || { echo "make push: set REGISTRY=host:port (e.g. 127.0.0.1:5000); KINDS=... to push some" >&2; exit 2; }
	@$(MAKE) --no-print-directory setup
	$(VENV)/bin/sandbox images push $(REGISTRY) $(KINDS)

bench: setup  ## set up whatever is missing, then benchmark against the docker CLI (BENCH_ARGS=--quick: a smoke run)
	$(PY) -m bench $(BENCH_ARGS)

unit:
	$(PY) -m pytest tests/unit -q
