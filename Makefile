# lookout — run `make` (or `make help`) to list targets.

SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO ?= go
# Extra flags for `make test`, e.g. make test TESTFLAGS='-run TestPoll -v'
TESTFLAGS ?=
# Extra arguments for `make run` / `make bench`
ARGS ?=
# The ports `make run`'s daemons serve /metrics, /healthz and /readyz on (127.0.0.1)
SYNCER_PORT ?= 9464
EVALUATOR_PORT ?= 9465

.PHONY: help build test test-citus test-scripts run bench bench-citus record-sql pg-start pg-stop fmt vet tidy

help: ## Show this help
	@echo 'Usage: make <target>'
	@echo
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z0-9_.-]+:[^#]*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build all commands into bin/
	$(GO) build -o bin/ ./cmd/...

test: ## Run the whole test suite (throwaway PostgreSQL, go vet, go test); TESTFLAGS='...'
	bash scripts/test.sh $(TESTFLAGS)

test-citus: ## The e2e tests and the routed packages on a local 3-node Citus cluster (builds Citus first if missing; scripts/test_citus.sh); TESTFLAGS='...'
	bash scripts/test_citus.sh $(TESTFLAGS)

test-scripts: ## Check the shell scripts' behaviour (scripts/pg_test.sh: its own cluster and port; scripts/run_test.sh: needs DATABASE_URL)
	bash scripts/pg_test.sh
	bash scripts/run_test.sh

run: ## Run lookout locally (scripts/run.sh); ARGS='...', SYNCER_PORT=9464, EVALUATOR_PORT=9465
	SYNCER_PORT='$(SYNCER_PORT)' EVALUATOR_PORT='$(EVALUATOR_PORT)' bash scripts/run.sh $(ARGS)

bench: ## Run the benchmarks (scripts/bench.sh); ARGS='...'
	bash scripts/bench.sh $(ARGS)

bench-citus: ## Benchmarks (1)(3)(4)(10) on a local durable 3-node Citus cluster against a single node, alternated, one table (builds Citus first if missing; scripts/bench_citus.sh); ARGS='...'
	bash scripts/bench_citus.sh $(ARGS)

record-sql: ## Record the SQL the binaries send for a release: make record-sql RELEASE=v0.2.0 (docs/development.md)
	@test -n "$(RELEASE)" || { echo 'usage: make record-sql RELEASE=vX.Y.Z' >&2; exit 2; }
	bash scripts/record-sql.sh $(RELEASE) $(TESTFLAGS)

pg-start: ## Start the dev PostgreSQL cluster in .data/pg and print its URL
	@bash scripts/pg.sh start

pg-stop: ## Stop the dev PostgreSQL cluster
	@bash scripts/pg.sh stop

fmt: ## gofmt -l -w the Go files known to git (tracked or untracked, not ignored)
	@git ls-files -z --cached --others --exclude-standard -- '*.go' \
		| xargs -0 -r sh -c 'for f; do [ -f "$$f" ] && printf "%s\0" "$$f"; done; exit 0' sh \
		| xargs -0 -r gofmt -l -w

vet: ## go vet ./...
	$(GO) vet ./...

tidy: ## go mod tidy
	$(GO) mod tidy
