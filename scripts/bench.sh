#!/usr/bin/env bash
# Benchmarks: scripts/bench.sh [lookout-bench flags], e.g. --records 10000 --rss-records 100000,
# or only the schedule measurement, quickly: --only 10 --sources 10000 --for 1m.
# Every figure is printed beside its baseline measured in the same run.
#
# When DATABASE_URL is unset, it starts a throwaway PostgreSQL cluster of its
# own in .data/pg-bench with PostgreSQL's durable settings (fsync,
# synchronous_commit and full_page_writes on; scripts/pg.sh,
# LOOKOUT_PG_DURABLE=1) — unlike the test cluster, which runs with fsync
# off — and stops it when it ends, however it ends.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
if [ -z "${DATABASE_URL:-}" ]; then
	BENCH_PG="$ROOT/.data/pg-bench"
	trap 'scripts/pg.sh stop "$BENCH_PG" || true' EXIT
	DATABASE_URL="$(LOOKOUT_PG_DURABLE=1 scripts/pg.sh start "$BENCH_PG")"
fi
export DATABASE_URL
go build -o bin/ ./cmd/lookout-bench ./cmd/syncer ./cmd/evaluator
bin/lookout-bench --syncer bin/syncer --evaluator bin/evaluator "$@"
