#!/usr/bin/env bash
# Benchmarks: scripts/bench.sh [lookout-bench flags], e.g. --records 10000 --rss-records 100000.
# Every figure is printed beside its baseline measured in the same run.
# Starts a throwaway PostgreSQL (scripts/pg.sh) when DATABASE_URL is unset.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
if [ -z "${DATABASE_URL:-}" ]; then
	DATABASE_URL="$(scripts/pg.sh start)"
fi
export DATABASE_URL
go build -o bin/ ./cmd/lookout-bench ./cmd/syncer
exec bin/lookout-bench --syncer bin/syncer "$@"
