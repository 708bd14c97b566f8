#!/usr/bin/env bash
# Whole test suite: throwaway PostgreSQL + Ollama fixture + go vet + go test.
#
#   scripts/test.sh [go test flags...]      e.g. scripts/test.sh -run TestPoll -v
#
# Environment:
#   TEST_DATABASE_URL     use this database instead of starting scripts/pg.sh
#   LOOKOUT_PG_DIR        cluster directory for scripts/pg.sh (default .data/pg);
#                         give concurrent runs different directories
#   LOOKOUT_PG_KEEP=1     leave a cluster this script started running afterwards
#   LOOKOUT_SKIP_OLLAMA=1 do not build .tools/bin/ollama when it is missing
#   LOOKOUT_SKIP_CHROMIUM=1 do not install chromium (the admin page's browser
#                         test) when it is missing
#   TEST_PKGS             packages to test (default ./...)
#
# The exit status is go test's (or go vet's, when vet fails: then go test does
# not run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

PKGS="${TEST_PKGS:-./...}"
OLLAMA_VERSION=v0.6.5
OLLAMA_BIN="$ROOT/.tools/bin/ollama"
MODEL="$(cd "$ROOT/.." && pwd -P)/shared/models/llama-2-tiny-random.gguf"

echo "== lookout test suite ($ROOT)"
if [ -n "${TEST_DATABASE_URL:-}" ]; then
	echo "   1. PostgreSQL: TEST_DATABASE_URL from the environment"
else
	echo "   1. PostgreSQL: throwaway cluster via scripts/pg.sh (${LOOKOUT_PG_DIR:-.data/pg})"
fi
echo "   2. Ollama fixture: $OLLAMA_BIN"
echo "   3. go vet ./...   4. go test -count=1 -timeout 15m $* $PKGS"

# --- PostgreSQL ----------------------------------------------------------------
# When we start the cluster we also stop it on exit, unless the user keeps it
# (LOOKOUT_PG_KEEP=1), it was already running before (e.g. `make pg-start`),
# or another scripts/test.sh run is still using it. Runs sharing a cluster
# hold a shared flock on PGDIR/test.lock for their lifetime; whoever leaves
# last (and gets the lock exclusively) stops a cluster that a test run started
# (marker PGDIR/test-started).
PG_DIR=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$PG_DIR" ] && [ "${LOOKOUT_PG_KEEP:-0}" != 1 ] && [ -f "$PG_DIR/test-started" ]; then
		if flock -x -n 8 2>/dev/null; then
			echo "== stopping PostgreSQL ($PG_DIR)"
			rm -f "$PG_DIR/test-started"
			"$ROOT/scripts/pg.sh" stop "$PG_DIR" 8<&- || true
		fi
	fi
	exit "$rc"
}

if [ -z "${TEST_DATABASE_URL:-}" ]; then
	PG_DIR="$(realpath -m -- "${LOOKOUT_PG_DIR:-$ROOT/.data/pg}")"
	mkdir -p "$PG_DIR"
	exec 8<>"$PG_DIR/test.lock"
	flock -s 8
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if ! "$ROOT/scripts/pg.sh" url "$PG_DIR" >/dev/null 2>&1; then
		: > "$PG_DIR/test-started"
	fi
	# 8<&-: the server must not inherit our lock.
	TEST_DATABASE_URL="$("$ROOT/scripts/pg.sh" start "$PG_DIR" 8<&-)"
fi
export TEST_DATABASE_URL
echo "== TEST_DATABASE_URL=$TEST_DATABASE_URL"

# --- Ollama ------------------------------------------------------------------
if [ ! -x "$OLLAMA_BIN" ] && [ "${LOOKOUT_SKIP_OLLAMA:-0}" != 1 ]; then
	mkdir -p "$ROOT/.tools"
	(
		# One build at a time; a concurrent run may have built it meanwhile.
		exec 7<>"$ROOT/.tools/ollama.lock"
		flock 7
		if [ ! -x "$OLLAMA_BIN" ]; then
			echo "== building ollama $OLLAMA_VERSION into .tools/bin (takes ~3 minutes; LOOKOUT_SKIP_OLLAMA=1 skips)"
			CGO_ENABLED=1 GOBIN="$ROOT/.tools/bin" GOFLAGS= go install "github.com/ollama/ollama@$OLLAMA_VERSION"
		fi
	)
fi
if [ -z "${LOOKOUT_TEST_OLLAMA:-}" ] && [ -x "$OLLAMA_BIN" ]; then
	export LOOKOUT_TEST_OLLAMA="$OLLAMA_BIN"
fi
if [ -z "${LOOKOUT_TEST_MODEL:-}" ] && [ -f "$MODEL" ]; then
	export LOOKOUT_TEST_MODEL="$MODEL"
fi
echo "== LOOKOUT_TEST_OLLAMA=${LOOKOUT_TEST_OLLAMA:-<unset: Ollama tests skip>}"
echo "== LOOKOUT_TEST_MODEL=${LOOKOUT_TEST_MODEL:-<unset: Ollama tests skip>}"

# --- Chromium ------------------------------------------------------------------
# The admin page's browser test (internal/admin) drives headless Chromium;
# Debian's package is installed when it is missing (as root, or with sudo).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && [ "${LOOKOUT_SKIP_CHROMIUM:-0}" != 1 ]; then
	SUDO=""
	if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then
		SUDO="sudo"
	fi
	if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
		echo "== installing chromium (Debian package) for the admin page's browser test (LOOKOUT_SKIP_CHROMIUM=1 skips)"
		$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
	else
		echo "== chromium is missing and cannot be installed here: the admin page's browser test skips"
	fi
fi
echo "== chromium: $(command -v chromium || command -v chromium-browser || echo '<missing: the browser test skips>')"

# --- Go ------------------------------------------------------------------------
echo "== go vet ./..."
go vet ./...

# --- The scripts' own checks -----------------------------------------------------
# A whole run (no flags, no TEST_PKGS) also checks scripts/pg.sh and
# scripts/run.sh (make test-scripts), beside go test: they mostly wait on
# their daemons.
SCRIPTS_PID=""
SCRIPTS_LOG=""
if [ $# -eq 0 ] && [ -z "${TEST_PKGS:-}" ]; then
	SCRIPTS_LOG="$(mktemp)"
	( bash "$ROOT/scripts/pg_test.sh" && DATABASE_URL="$TEST_DATABASE_URL" bash "$ROOT/scripts/run_test.sh" ) >"$SCRIPTS_LOG" 2>&1 8<&- &
	SCRIPTS_PID=$!
fi

# A whole run measures the CI smoke's ratios (internal/bench, TestSmoke*)
# after the suite, alone: under a dozen other test binaries their Go side
# slows more than their baselines (docs/benchmarks.md).
SMOKE_AFTER=""
if [ $# -eq 0 ] && [ -z "${TEST_PKGS:-}" ]; then
	SMOKE_AFTER=1
fi
echo "== go test -count=1 -timeout 15m $* $PKGS"
set +e
# shellcheck disable=SC2086 # PKGS may hold several patterns
LOOKOUT_SMOKE_AFTER="$SMOKE_AFTER" go test -count=1 -timeout 15m "$@" $PKGS
rc=$?
set -e
echo "== go test exit status $rc"
if [ -n "$SCRIPTS_PID" ]; then
	set +e
	wait "$SCRIPTS_PID"
	src=$?
	set -e
	echo "== scripts' checks (scripts/pg_test.sh, scripts/run_test.sh): exit status $src"
	sed 's/^/   /' "$SCRIPTS_LOG"
	rm -f "$SCRIPTS_LOG"
	if [ "$rc" = 0 ] && [ "$src" != 0 ]; then
		rc=$src
	fi
fi
if [ -n "$SMOKE_AFTER" ]; then
	echo "== go test -count=1 -run '^TestSmoke' ./internal/bench/ (the CI smoke, alone)"
	set +e
	go test -count=1 -timeout 10m -run '^TestSmoke' ./internal/bench/
	krc=$?
	set -e
	echo "== CI smoke exit status $krc"
	if [ "$rc" = 0 ] && [ "$krc" != 0 ]; then
		rc=$krc
	fi
fi
exit "$rc"
