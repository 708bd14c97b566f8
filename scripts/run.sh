#!/usr/bin/env bash
# Run lookout locally: syncer and evaluator as two processes against one
# PostgreSQL, on the offline example configuration.
#
#   scripts/run.sh [CONFIG_DIR]      (default examples/config)
#
# Each daemon serves /metrics, /healthz and /readyz on 127.0.0.1, at a port
# of its own variable: SYNCER_PORT (default 9464) and EVALUATOR_PORT
# (default 9465), e.g. `make run SYNCER_PORT=19464 EVALUATOR_PORT=19465`
# when another lookout already runs.
#
# When DATABASE_URL is unset this script starts a throwaway PostgreSQL under
# .data/pg (git-ignored) with scripts/pg.sh and stops it on exit; the binaries
# themselves never start a database. Ctrl-C stops everything.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"
CONFIG="${1:-examples/config}"
SYNCER_PORT="${SYNCER_PORT:-9464}"
EVALUATOR_PORT="${EVALUATOR_PORT:-9465}"

# listening reports whether something listens on 127.0.0.1:$1.
listening() {
	if command -v ss >/dev/null 2>&1; then
		[ -n "$(ss -Htln "( sport = :$1 )" 2>/dev/null | head -n 1)" ]
		return
	fi
	(exec 7<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
for var in SYNCER_PORT EVALUATOR_PORT; do
	port="${!var}"
	if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
		echo "run.sh: $var=$port is not a TCP port (1-65535)" >&2
		exit 2
	fi
	if listening "$port"; then
		echo "run.sh: $var=$port: something already listens on 127.0.0.1:$port (another make run?); choose another, e.g. make run $var=$((port + 10000))" >&2
		exit 2
	fi
done
if [ "$SYNCER_PORT" = "$EVALUATOR_PORT" ]; then
	echo "run.sh: SYNCER_PORT and EVALUATOR_PORT are both $SYNCER_PORT; give each daemon its own port" >&2
	exit 2
fi

started_pg=0
pids=()
cleanup() {
	trap - EXIT INT TERM
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "$started_pg" = 1 ]; then
		echo "== stopping the throwaway PostgreSQL" >&2
		scripts/pg.sh stop >&2 || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

throwaway=0
if [ -z "${DATABASE_URL:-}" ]; then
	throwaway=1
	if ! scripts/pg.sh url >/dev/null 2>&1; then started_pg=1; fi
	DATABASE_URL="$(scripts/pg.sh start)"
	echo "== DATABASE_URL unset: started a throwaway PostgreSQL at $DATABASE_URL" >&2
fi
export DATABASE_URL

echo "== building bin/syncer and bin/evaluator" >&2
go build -o bin/ ./cmd/syncer ./cmd/evaluator

bin/syncer --config "$CONFIG" check
bin/syncer --config "$CONFIG" migrate
if [ "$throwaway" = 1 ]; then
	# The throwaway database keeps the definitions of the last `make run`,
	# whose directory may have been another (or an older examples/config):
	# a daemon would refuse this one as divergent (docs/config.md,
	# "Generations"). Here the developer chose it: apply it. A database of
	# your own (DATABASE_URL set) is never forced.
	bin/syncer --config "$CONFIG" apply --force >&2
fi

cat >&2 <<MSG
== running syncer and evaluator on $CONFIG (Ctrl-C stops both)
   syncer:    http://127.0.0.1:$SYNCER_PORT/metrics (SYNCER_PORT)
   evaluator: http://127.0.0.1:$EVALUATOR_PORT/metrics (EVALUATOR_PORT)
   Try: edit a line of examples/data/tasks.jsonl, or drop a new .jsonl file
   into examples/data/, and watch for msg=notification below.
MSG
bin/syncer --config "$CONFIG" run --listen "127.0.0.1:$SYNCER_PORT" &
pids+=($!)
bin/evaluator --config "$CONFIG" run --listen "127.0.0.1:$EVALUATOR_PORT" &
pids+=($!)
# Exit when either process exits (wait -n), or on Ctrl-C via the trap.
wait -n "${pids[@]}"
