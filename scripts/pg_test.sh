#!/usr/bin/env bash
# Checks scripts/pg.sh: a start keeps the port recorded in DIR/port when
# that port only has connections in TIME-WAIT (a server that just stopped
# with clients connected leaves them), instead of silently moving to
# another port. Uses its own DIR and a free port; never touches other
# clusters (it stops only the one it started).
#
#   scripts/pg_test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DIR="$(mktemp -d /tmp/lookout-pg-test.XXXXXX)"
chmod 755 "$DIR"
trap 'bash "$ROOT/scripts/pg.sh" stop "$DIR" >/dev/null 2>&1 || true; rm -rf "$DIR" "$(cat "$DIR/cluster" 2>/dev/null || echo /nonexistent)"' EXIT

# A free port, with a server-side TIME-WAIT connection on it: the server
# closes first, then the client; nothing listens afterwards.
PORT="$(python3 - <<'PY'
import socket, time
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL's listener
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
cli = socket.create_connection(("127.0.0.1", port))
conn, _ = srv.accept()
conn.close()          # the server side closes first: it goes to TIME-WAIT
time.sleep(0.1)
cli.close()
srv.close()
print(port)
PY
)"
if ! ss -Htan state time-wait "( sport = :$PORT )" | grep -q .; then
	echo "pg_test: could not create a TIME-WAIT socket on port $PORT" >&2
	exit 1
fi
echo "$PORT" > "$DIR/port"
URL="$(bash "$ROOT/scripts/pg.sh" start "$DIR" 2>"$DIR/stderr")" || { cat "$DIR/stderr" >&2; exit 1; }
case "$URL" in
*":$PORT/"*) echo "pg_test: ok: started on $PORT despite its TIME-WAIT connection" ;;
*)
	cat "$DIR/stderr" >&2
	echo "pg_test: FAIL: wanted port $PORT (only TIME-WAIT there), got $URL" >&2
	exit 1
	;;
esac
