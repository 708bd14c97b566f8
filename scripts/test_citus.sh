#!/usr/bin/env bash
# The tests on a real Citus cluster (docs/scaling.md "On Citus", docs/development.md):
# builds Citus when it is missing, starts a coordinator and two workers on this
# machine, migrates a schema (which distributes it), runs the end-to-end tests
# and the packages whose statements Citus routes against the coordinator, then
# the fault tests (a worker stopped for 30 s during sync, evaluation and
# delivery: internal/e2e TestCitusWorker*, alone, as they stop a worker), and
# stops the cluster.
#
#   scripts/test_citus.sh [go test flags...]      e.g. scripts/test_citus.sh -run TestPipeline -v
#
# Environment:
#   LOOKOUT_CITUS_SCRIPTS  the directory of build.sh and cluster.sh (default: shared/citus
#                          beside the checkout, or beside its parent for a worktree)
#   CITUS_GIT_DIR          a git directory of github.com/citusdata/citus for build.sh (default:
#                          .mirror/citusdata+citus/repo beside shared/, else a shallow bare
#                          clone of the tag into .data/citus-src.git)
#   LOOKOUT_CITUS_DIR      the cluster's directory (default .data/citus)
#   LOOKOUT_CITUS_PORT     the coordinator's port; the workers take the next two (default 54400)
#   LOOKOUT_CITUS_SHARDS   citus.shard_count of the test database (default 4: the tests'
#                          pool of schemas is made and emptied faster with few shards)
#   LOOKOUT_CITUS_KEEP=1   leave the cluster running afterwards (the next run uses it)
#   TEST_PKGS              packages to test (default: the end-to-end tests and
#                          db changes outbox notify evaluator syncer taskrunner retention)
#   LOOKOUT_CITUS_FAULTS=0 skip the fault tests (LOOKOUT_CITUS_FAULTS=only runs only them)
#
# The exit status is go test's (the first of the two steps that failed), or
# the first step's that failed before them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

# shellcheck source=scripts/citus_common.sh
. "$ROOT/scripts/citus_common.sh"
citus_scripts
scripts="$CITUS_SCRIPTS"
DIR="$(realpath -m -- "${LOOKOUT_CITUS_DIR:-$ROOT/.data/citus}")"
PORT="${LOOKOUT_CITUS_PORT:-54400}"
SHARDS="${LOOKOUT_CITUS_SHARDS:-4}"
PKGS="${TEST_PKGS:-./internal/e2e/ ./internal/db/ ./internal/changes/ ./internal/outbox/ ./internal/notify/ ./internal/evaluator/ ./internal/syncer/ ./internal/taskrunner/ ./internal/retention/}"

# --- Citus ---------------------------------------------------------------------
citus_build

# --- The cluster ------------------------------------------------------------------
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "${LOOKOUT_CITUS_KEEP:-0}" != 1 ]; then
		echo "== stopping the Citus cluster ($DIR)"
		"$scripts/cluster.sh" stop "$DIR" || true
	fi
	exit "$rc"
}
citus_lock "$DIR"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# A cluster left running (LOOKOUT_CITUS_KEEP=1) is used again: cluster.sh
# refuses to start nodes that run.
running=1
for i in 0 1 2; do
	if ! pg_isready -q -h 127.0.0.1 -p $((PORT + i)) || [ ! -f "$DIR/node$i/postmaster.pid" ]; then
		running=0
	fi
done
if [ "$running" = 1 ]; then
	echo "== using the running coordinator on $PORT and its 2 workers ($DIR)"
	URL="postgres://postgres@127.0.0.1:$PORT/lookout?sslmode=disable"
else
	echo "== starting a coordinator on $PORT and 2 workers ($DIR)"
	URL="$("$scripts/cluster.sh" start "$DIR" "$PORT" 2)"
fi
psql "$URL" -XAtqc "ALTER DATABASE lookout SET citus.shard_count = $SHARDS" >/dev/null
echo "   $(psql "$URL" -XAtc "SELECT 'citus ' || extversion || ', ' || (SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary') || ' nodes' FROM pg_extension WHERE extname = 'citus'")"

# --- Migrations -------------------------------------------------------------------
# A schema of its own, migrated (and so distributed) by the binaries' own
# migrate command, then checked: every table docs/scaling.md names is where it
# says. The tests below migrate a schema per test the same way.
SCHEMA=citus_check
psql "$URL" -XAtqc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE; CREATE SCHEMA $SCHEMA" >/dev/null
echo "== migrate (twice: the distribution step is idempotent)"
DATABASE_URL="$URL&search_path=$SCHEMA" go run ./cmd/api migrate
DATABASE_URL="$URL&search_path=$SCHEMA" go run ./cmd/api migrate
psql "$URL" -XAc "SELECT logicalrelid::regclass AS \"table\", CASE partmethod WHEN 'h' THEN 'distributed by ' || column_to_column_name(logicalrelid, partkey) WHEN 'n' THEN 'reference' END AS layout, colocationid AS colocation FROM pg_dist_partition WHERE logicalrelid::regclass::text LIKE '$SCHEMA.%' AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = logicalrelid) ORDER BY partmethod, colocationid, 1"

# --- Tests ------------------------------------------------------------------------
# Per-test databases copied from a template have no Citus: pgtest leases each
# test a schema from a pool of distributed schemas in the coordinator's
# database instead, emptied for it (internal/pgtest/citus.go; the pool stays
# in the cluster's directory between runs).
export TEST_DATABASE_URL="$URL"
export LOOKOUT_PGTEST_TEMPLATE=0
# Making a schema of the pool (the first run, or after a test changed one)
# takes minutes on a busy machine.
export LOOKOUT_PGTEST_MIGRATE_TIMEOUT="${LOOKOUT_PGTEST_MIGRATE_TIMEOUT:-10m}"
# Each wait of a test on state (internal/testsignal) is bounded by 20 s on one
# PostgreSQL; through the coordinator on a busy machine a daemon's start took
# longer (load 40 on 2 cores): 2 minutes here.
export LOOKOUT_TESTSIGNAL_TIMEOUT="${LOOKOUT_TESTSIGNAL_TIMEOUT:-2m}"
# The Ollama fixture of scripts/test.sh, when it is there (this script does not
# build it): without it the end-to-end tests of a real model's answers
# (TestTaskReviewWithRealBinaries, TestDryRunWithModelIsAnsweredByTheEvaluator,
# TestDriftWithRealOllama) skip.
if [ -z "${LOOKOUT_TEST_OLLAMA:-}" ] && [ -x "$ROOT/.tools/bin/ollama" ]; then
	export LOOKOUT_TEST_OLLAMA="$ROOT/.tools/bin/ollama"
fi
for model in "$ROOT/../shared/models/llama-2-tiny-random.gguf" "$ROOT/../../shared/models/llama-2-tiny-random.gguf"; do
	if [ -z "${LOOKOUT_TEST_MODEL:-}" ] && [ -f "$model" ]; then
		export LOOKOUT_TEST_MODEL="$(realpath -- "$model")"
	fi
done
echo "== LOOKOUT_TEST_OLLAMA=${LOOKOUT_TEST_OLLAMA:-<unset: Ollama tests skip>} LOOKOUT_TEST_MODEL=${LOOKOUT_TEST_MODEL:-<unset: Ollama tests skip>}"
echo "== TEST_DATABASE_URL=$TEST_DATABASE_URL LOOKOUT_PGTEST_TEMPLATE=0 LOOKOUT_PGTEST_MIGRATE_TIMEOUT=$LOOKOUT_PGTEST_MIGRATE_TIMEOUT LOOKOUT_TESTSIGNAL_TIMEOUT=$LOOKOUT_TESTSIGNAL_TIMEOUT"
rc=0
if [ "${LOOKOUT_CITUS_FAULTS:-1}" != only ]; then
	echo "== go test -count=1 -timeout 60m $* $PKGS"
	set +e
	# shellcheck disable=SC2086 # PKGS holds several patterns
	go test -count=1 -timeout 60m "$@" $PKGS
	rc=$?
	set -e
	echo "== go test exit status $rc"
fi

# --- Faults -----------------------------------------------------------------------
# A worker stopped for 30 s during sync, evaluation and delivery (docs/scaling.md
# "Faults on Citus"): the test stops and starts a worker's PostgreSQL with pg_ctl,
# so it runs alone, after the others; it is skipped without LOOKOUT_CITUS_WORKER_DIRS.
if [ "${LOOKOUT_CITUS_FAULTS:-1}" != 0 ]; then
	export LOOKOUT_CITUS_WORKER_DIRS="$DIR/node1:$DIR/node2"
	echo "== LOOKOUT_CITUS_WORKER_DIRS=$LOOKOUT_CITUS_WORKER_DIRS go test -count=1 -timeout 30m -v -run '^TestCitusWorker' ./internal/e2e/"
	set +e
	go test -count=1 -timeout 30m -v -run '^TestCitusWorker' ./internal/e2e/
	frc=$?
	set -e
	echo "== fault tests exit status $frc"
	if [ "$rc" = 0 ]; then
		rc=$frc
	fi
fi
exit "$rc"
