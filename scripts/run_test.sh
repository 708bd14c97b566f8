#!/usr/bin/env bash
# Checks scripts/run.sh (make run): SYNCER_PORT and EVALUATOR_PORT move the
# daemons' /metrics, /healthz and /readyz listeners. Runs against
# DATABASE_URL's server in a database of its own (created and dropped
# here; PostgreSQL's client tools needed), on two free ports.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:54329/lookout?sslmode=disable scripts/run_test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
: "${DATABASE_URL:?set DATABASE_URL to a PostgreSQL server this check may create a database in}"
DB="lookout_run_test_$$"
ADMIN_URL="$DATABASE_URL"
psql -X -q "$ADMIN_URL" -c "CREATE DATABASE $DB" >/dev/null
URL="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$DATABASE_URL" "$DB")"
read -r SPORT EPORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
OUT="$(mktemp)"
run=""
cleanup() {
	if [ -n "$run" ]; then kill -TERM "$run" 2>/dev/null || true; wait "$run" 2>/dev/null || true; fi
	psql -X -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null || true
	rm -f "$OUT"
}
trap cleanup EXIT

# Bad values are refused, naming the variable.
# (Accepted, run.sh would run the daemons until the timeout kills it.)
status=0
SYNCER_PORT=http DATABASE_URL="$URL" timeout 60 bash "$ROOT/scripts/run.sh" >"$OUT" 2>&1 || status=$?
if [ "$status" = 0 ] || [ "$status" = 124 ]; then
	echo "run_test: FAIL: SYNCER_PORT=http was accepted" >&2; exit 1
fi
grep -q "SYNCER_PORT" "$OUT" || { cat "$OUT" >&2; echo "run_test: FAIL: the error does not name SYNCER_PORT" >&2; exit 1; }

SYNCER_PORT="$SPORT" EVALUATOR_PORT="$EPORT" DATABASE_URL="$URL" bash "$ROOT/scripts/run.sh" >"$OUT" 2>&1 &
run=$!
deadline=$((SECONDS + 300))
until curl -fsS "127.0.0.1:$SPORT/healthz" >/dev/null 2>&1 && curl -fsS "127.0.0.1:$EPORT/healthz" >/dev/null 2>&1; do
	if ! kill -0 "$run" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
		tail -n 30 "$OUT" >&2
		echo "run_test: FAIL: the syncer and evaluator did not serve /healthz on $SPORT and $EPORT" >&2
		exit 1
	fi
	sleep 0.5
done
echo "run_test: ok: syncer on $SPORT, evaluator on $EPORT"
