#!/usr/bin/env bash
# The benchmarks on a 3-node Citus cluster against one PostgreSQL, on this
# machine, in one run (docs/benchmarks.md "On Citus", docs/scaling.md
# "Measured: one node against three, on one machine"): builds Citus when
# it is missing, starts a coordinator and two workers AND a single node of
# its own, every node with the durable settings of scripts/bench.sh (fsync,
# synchronous_commit and full_page_writes on, wal_level replica,
# shared_buffers 256MB, checkpoint_timeout 30min, max_wal_size 2GB), runs
# each chosen measurement alternated (single 1, citus 1, single 2, citus 2,
# ...) with lookout-bench --only N (--nodes on the cluster: each worker's
# PostgreSQL CPU and WAL beside the coordinator's), prints one table of
# every run with the load average it ran at and the cluster's overhead,
# and stops what it started.
#
#   scripts/bench_citus.sh [lookout-bench flags...]
#     e.g. scripts/bench_citus.sh --sources 10000 --for 1m --warmup 1m
#
# The flags go to every run after the script's own defaults (--rate 100
# --backlog 10000: at 1,000 changes/s of one source the cluster on one
# machine fell behind, and (3) fails when changes are still pending 30 s
# after the load; a backlog of 100,000 took 20 minutes a run there).
#
# Environment:
#   LOOKOUT_BENCH_ONLY          the measurements, each alternated (default 1,3,4,10)
#   LOOKOUT_BENCH_PAIRS         runs of each on each side (default 2)
#   LOOKOUT_BENCH_CITUS_DIR     the cluster's directory (default .data/bench-citus)
#   LOOKOUT_BENCH_CITUS_PORT    the coordinator's port; the workers take the next two (default 54500)
#   LOOKOUT_BENCH_CITUS_SHARDS  citus.shard_count of the database (default 32, as deployed)
#   LOOKOUT_BENCH_PG_DIR        the single node's directory (default .data/bench-single; scripts/pg.sh)
#   LOOKOUT_BENCH_PG_PORT       the port the single node prefers (default the coordinator's + 10)
#   LOOKOUT_BENCH_OUT           the runs' output and --json files (default .data/bench-citus-runs/<UTC time>)
#   LOOKOUT_CITUS_SCRIPTS, CITUS_GIT_DIR  as for scripts/test_citus.sh
#
# The exit status is 1 when a run failed (the table shows the others).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

# shellcheck source=scripts/citus_common.sh
. "$ROOT/scripts/citus_common.sh"
citus_scripts
ONLY="${LOOKOUT_BENCH_ONLY:-1,3,4,10}"
PAIRS="${LOOKOUT_BENCH_PAIRS:-2}"
DIR="$(realpath -m -- "${LOOKOUT_BENCH_CITUS_DIR:-$ROOT/.data/bench-citus}")"
PORT="${LOOKOUT_BENCH_CITUS_PORT:-54500}"
SHARDS="${LOOKOUT_BENCH_CITUS_SHARDS:-32}"
PGDIR="$(realpath -m -- "${LOOKOUT_BENCH_PG_DIR:-$ROOT/.data/bench-single}")"
PGPORT="${LOOKOUT_BENCH_PG_PORT:-$((PORT + 10))}"
OUT="$(realpath -m -- "${LOOKOUT_BENCH_OUT:-$ROOT/.data/bench-citus-runs/$(date -u +%Y%m%dT%H%M%SZ)}")"
case "$PAIRS" in '' | *[!0-9]* | 0) echo "bench_citus: LOOKOUT_BENCH_PAIRS=$PAIRS: want a number of runs >= 1" >&2; exit 2 ;; esac
for m in ${ONLY//,/ }; do
	case "$m" in 1 | 3 | 4 | 10) ;; *) echo "bench_citus: LOOKOUT_BENCH_ONLY=$ONLY: measurement $m is not one of 1, 3, 4, 10" >&2; exit 2 ;; esac
done

citus_build

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	echo "== stopping the Citus cluster ($DIR) and the single node ($PGDIR)"
	"$CITUS_SCRIPTS/cluster.sh" stop "$DIR" || true
	scripts/pg.sh stop "$PGDIR" || true
	exit "$rc"
}
citus_lock "$DIR"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- The cluster: durable, as scripts/pg.sh LOOKOUT_PG_DURABLE=1 --------------------
echo "== starting a coordinator on $PORT and 2 workers ($DIR), citus.shard_count $SHARDS"
"$CITUS_SCRIPTS/cluster.sh" stop "$DIR" 2>/dev/null || true
"$CITUS_SCRIPTS/cluster.sh" start "$DIR" "$PORT" 2 >/dev/null
for i in 0 1 2; do
	args=()
	for s in "fsync = on" "synchronous_commit = on" "full_page_writes = on" "wal_level = replica" \
		"shared_buffers = '256MB'" "checkpoint_timeout = '30min'" "max_wal_size = '2GB'" "timezone = 'UTC'"; do
		args+=(-c "ALTER SYSTEM SET $s")
	done
	psql -h 127.0.0.1 -p $((PORT + i)) -U postgres -d lookout -Xq "${args[@]}"
done
# shared_buffers and wal_level take a restart.
"$CITUS_SCRIPTS/cluster.sh" stop "$DIR"
URL="$("$CITUS_SCRIPTS/cluster.sh" start "$DIR" "$PORT" 2)"
psql "$URL" -XAtqc "ALTER DATABASE lookout SET citus.shard_count = $SHARDS" >/dev/null
W1="postgres://postgres@127.0.0.1:$((PORT + 1))/lookout?sslmode=disable"
W2="postgres://postgres@127.0.0.1:$((PORT + 2))/lookout?sslmode=disable"
for u in "$URL" "$W1" "$W2"; do
	echo "   $u: $(psql "$u" -XAtc "SELECT 'fsync ' || current_setting('fsync') || ', synchronous_commit ' || current_setting('synchronous_commit') || ', full_page_writes ' || current_setting('full_page_writes') || ', wal_level ' || current_setting('wal_level') || ', shared_buffers ' || current_setting('shared_buffers') || ', max_wal_size ' || current_setting('max_wal_size') || ', citus ' || (SELECT extversion FROM pg_extension WHERE extname = 'citus')")"
done

# --- The single node -----------------------------------------------------------------
mkdir -p "$PGDIR"
[ -f "$PGDIR/port" ] || echo "$PGPORT" >"$PGDIR/port"
echo "== starting the single node ($PGDIR)"
SINGLE="$(LOOKOUT_PG_DURABLE=1 scripts/pg.sh start "$PGDIR")"
echo "   $SINGLE: $(psql "$SINGLE" -XAtc "SELECT 'fsync ' || current_setting('fsync') || ', synchronous_commit ' || current_setting('synchronous_commit') || ', full_page_writes ' || current_setting('full_page_writes') || ', wal_level ' || current_setting('wal_level') || ', shared_buffers ' || current_setting('shared_buffers') || ', max_wal_size ' || current_setting('max_wal_size')")"

# --- The runs, alternated ------------------------------------------------------------
go build -o bin/ ./cmd/lookout-bench ./cmd/syncer ./cmd/evaluator
mkdir -p "$OUT"
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo '+changes')"
echo "== commit $commit; runs in $OUT; measurements $ONLY, $PAIRS pair(s) each; flags --rate 100 --backlog 10000 $*"
failed=0
files=()
for m in ${ONLY//,/ }; do
	for i in $(seq 1 "$PAIRS"); do
		for side in single citus; do
			name="$m-$side-$i"
			if [ "$side" = single ]; then
				url="$SINGLE" nodes=()
			else
				url="$URL" nodes=(--nodes "$W1,$W2")
			fi
			echo "== ($m) $side $i, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
			set +e
			DATABASE_URL="$url" bin/lookout-bench --syncer bin/syncer --evaluator bin/evaluator --only "$m" \
				--rate 100 --backlog 10000 "$@" "${nodes[@]}" --label "$side $i" --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.txt"
			rc=${PIPESTATUS[0]}
			set -e
			if [ "$rc" = 0 ]; then
				files+=("$OUT/$name.json")
			else
				echo "== ($m) $side $i failed (exit status $rc; $OUT/$name.txt)"
				failed=1
			fi
		done
	done
done

echo
echo "== commit $commit, $(nproc) cores; single node: one PostgreSQL; citus: a coordinator and 2 workers, citus.shard_count $SHARDS; every node durable"
echo "== PG CPU and WAL on citus: coordinator+worker 1+worker 2 = sum; load: the 1-minute load average during the run (min-max)"
if [ "${#files[@]}" -gt 0 ]; then
	bin/lookout-bench --compare "${files[@]}" | tee "$OUT/table.txt"
fi
exit "$failed"
