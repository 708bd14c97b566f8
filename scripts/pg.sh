#!/usr/bin/env bash
# Throwaway PostgreSQL cluster for development and tests.
#
#   scripts/pg.sh start  [DIR]   create (if needed) and start; print the URL
#   scripts/pg.sh url    [DIR]   print the URL of the running cluster
#   scripts/pg.sh stop   [DIR]   stop it (succeeds quietly when not running)
#   scripts/pg.sh status [DIR]   exit 0 when running, 3 when not
#
# DIR defaults to .data/pg in the repository root (git-ignored). A relative DIR
# is taken relative to the current directory.
#
# stdout carries exactly one line (the URL, for start and url); everything
# else goes to stderr or to the server log (DIR/log).
#
# Durability. Tests run with fsync, synchronous_commit and full_page_writes
# off (a crash only loses a throwaway cluster). With LOOKOUT_PG_DURABLE=1,
# start writes PostgreSQL's durable defaults instead (fsync,
# synchronous_commit and full_page_writes on, wal_level replica), as a
# production server runs: the benchmarks use it (scripts/bench.sh).
#
# Layout. The cluster lives in a "cluster root" CROOT:
#   CROOT/data            PGDATA (owned by the user running the server)
#   CROOT/.s.PGSQL.PORT   the only unix socket (unix_socket_directories=CROOT)
#   CROOT/log             initdb + server log
# and DIR always holds:
#   DIR/port              the TCP port chosen at the last start (127.0.0.1 only)
#   DIR/cluster           only when CROOT != DIR: the absolute path of CROOT
#   DIR/log               CROOT/log itself, or a symlink to it
#
# Where CROOT is. Normally CROOT = DIR. Two things can make DIR unusable:
#  * We are root. initdb/postgres refuse to run as root, so the cluster is
#    created and run as the `postgres` user and DIR is chown'ed to it. That
#    user must also be able to traverse every parent of DIR (e.g. a checkout
#    under /root, mode 700, is not traversable). We never loosen permissions
#    of directories we did not create; instead we test with the postgres user
#    whether DIR is reachable and writable.
#  * The unix socket path CROOT/.s.PGSQL.NNNNN must fit in 107 bytes.
# When DIR is unusable, the cluster goes to /tmp/lookout-pg-<sha256(DIR)[:12]>
# (short, world-traversable, deterministic per DIR so restarts reuse the data)
# and its path is written to DIR/cluster. We record the location in a file
# rather than turning DIR into a symlink because DIR may already exist as a
# directory (or contain other files), and because a plain file cannot dangle
# in surprising ways: if /tmp was wiped, `start` simply initialises a new
# cluster there and `stop` finds nothing running.
#
# Ports. Starts are serialised machine-wide with flock(/tmp/lookout-pg.lock),
# so two clusters (different DIRs) starting at the same time cannot pick the
# same port: the port is chosen and bound while holding the lock. We prefer
# the port recorded in DIR/port, then 54329, 54330, ...; a port is skipped
# when something listens on it (connections in TIME-WAIT do not count:
# PostgreSQL binds over them), and if the server still fails to bind (a
# process outside our control raced us) the next port is tried. Either move
# is said on stderr, with the port used.
set -euo pipefail

# stdout is reserved for the URL: keep the real stdout on fd 3 and send
# everything else to stderr.
exec 3>&1 1>&2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEFAULT_PORT=54329
DB=lookout
ROLE=postgres
# Always /tmp (not $TMPDIR): the lock must be shared by every user and the
# fallback cluster root must be traversable by the postgres user.
LOCK_FILE=/tmp/lookout-pg.lock
START_TIMEOUT=60

export LC_ALL=C
unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGOPTIONS PGSERVICE PGDATA PGPASSWORD 2>/dev/null || true

log() { printf 'pg.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
	sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

# Run a command as the user owning the cluster, with all file descriptors
# above 2 closed. The latter matters: postgres inherits them otherwise, and
# an inherited pipe (e.g. from URL=$(scripts/pg.sh start)) would make the
# caller wait forever, an inherited lock fd would keep the start lock held
# for the life of the server.
as_pg() {
	(
		cd /
		if [ -d "/proc/$BASHPID/fd" ]; then
			for fd in "/proc/$BASHPID/fd/"*; do
				fd="${fd##*/}"
				[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null || true
			done
		else
			for fd in 3 4 5 6 7 8 9; do eval "exec $fd>&-" 2>/dev/null || true; done
		fi
		if [ "$IS_ROOT" -eq 1 ]; then
			exec runuser -u postgres -- "$@"
		else
			exec "$@"
		fi
	)
}

find_pgbin() {
	local p
	if [ -n "${PGBIN:-}" ] && [ -x "$PGBIN/initdb" ]; then
		echo "$PGBIN"; return 0
	fi
	if p="$(command -v initdb 2>/dev/null)"; then
		p="$(readlink -f "$p")"
		dirname "$p"; return 0
	fi
	p="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
	if [ -n "$p" ] && [ -x "$p/initdb" ]; then
		echo "$p"; return 0
	fi
	return 1
}

install_postgres() {
	log "PostgreSQL not found; installing Debian's postgresql package"
	local sudo=()
	if [ "$IS_ROOT" -ne 1 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			die "initdb not found and not root: install PostgreSQL (apt-get install postgresql) or set PGBIN"
		fi
	fi
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
}

resolve_pgbin() {
	PGBIN="$(find_pgbin)" || { install_postgres; PGBIN="$(find_pgbin)" || die "initdb still not found after installing postgresql"; }
	for b in initdb pg_ctl postgres pg_isready psql; do
		[ -x "$PGBIN/$b" ] || die "$PGBIN/$b missing"
	done
	if [ "$IS_ROOT" -eq 1 ]; then
		id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user (install the postgresql package)"
	fi
}

# --- locations -------------------------------------------------------------

set_dir() {
	local d="${1:-$ROOT/.data/pg}"
	DIR="$(realpath -m -- "$d")"
	HASH="$(printf '%s' "$DIR" | sha256sum | cut -c1-12)"
	FALLBACK="/tmp/lookout-pg-$HASH"
}

# CROOT for an existing setup (url/stop/status): DIR/cluster or DIR.
existing_croot() {
	if [ -f "$DIR/cluster" ]; then
		CROOT="$(cat "$DIR/cluster")"
	else
		CROOT="$DIR"
	fi
	PGDATA_DIR="$CROOT/data"
}

# Whether the cluster user can create and use files in $1.
usable_by_pg() {
	local d="$1"
	# 5-digit port + "/.s.PGSQL." = 15 bytes; keep the socket path < 108.
	[ $(( ${#d} + 15 )) -le 107 ] || { log "socket path under $d would be too long"; return 1; }
	as_pg test -d "$d" -a -w "$d" -a -x "$d" 2>/dev/null
}

# mkdir owned by the cluster user, mode 700 (or 755 for DIR so that the
# socket is reachable by other local users, e.g. root's psql).
make_pg_dir() {
	local d="$1"
	mkdir -p -- "$d"
	if [ "$IS_ROOT" -eq 1 ]; then
		chown postgres:postgres -- "$d"
	fi
	chmod 755 -- "$d"
}

choose_croot() {
	local prev=""
	[ -f "$DIR/cluster" ] && prev="$(cat "$DIR/cluster")"

	# Reuse a previous fallback location when it still holds a cluster.
	if [ -n "$prev" ] && [ -f "$prev/data/PG_VERSION" ]; then
		CROOT="$prev"
	elif [ -f "$DIR/data/PG_VERSION" ] && usable_by_pg "$DIR"; then
		CROOT="$DIR"
	else
		make_pg_dir "$DIR"
		if usable_by_pg "$DIR"; then
			CROOT="$DIR"
		else
			log "the cluster user cannot use $DIR; putting the cluster in $FALLBACK"
			CROOT="$FALLBACK"
		fi
	fi

	if [ "$CROOT" != "$DIR" ]; then
		if [ ! -d "$CROOT" ]; then
			(umask 077; mkdir -p -- "$CROOT")
			[ "$IS_ROOT" -eq 1 ] && chown postgres:postgres -- "$CROOT"
		fi
		# Refuse a pre-existing fallback directory that belongs to someone else.
		local owner want
		owner="$(stat -c %u -- "$CROOT")"
		if [ "$IS_ROOT" -eq 1 ]; then want="$(id -u postgres)"; else want="$(id -u)"; fi
		[ "$owner" = "$want" ] || die "$CROOT exists but is owned by uid $owner"
		chmod 755 -- "$CROOT"
		usable_by_pg "$CROOT" || die "cannot use $CROOT either"
		printf '%s\n' "$CROOT" > "$DIR/cluster"
		ln -sfn -- "$CROOT/log" "$DIR/log"
	else
		rm -f -- "$DIR/cluster"
	fi
	PGDATA_DIR="$CROOT/data"
}

# --- state -----------------------------------------------------------------

is_running() {
	[ -f "$PGDATA_DIR/PG_VERSION" ] || return 1
	as_pg "$PGBIN/pg_ctl" status -D "$PGDATA_DIR" >/dev/null 2>&1
}

# The port of the running server, from postmaster.pid (line 4).
running_port() {
	local p
	p="$(as_pg sed -n 4p "$PGDATA_DIR/postmaster.pid" 2>/dev/null || true)"
	[[ "$p" =~ ^[0-9]+$ ]] || p="$(cat "$DIR/port" 2>/dev/null || true)"
	[[ "$p" =~ ^[0-9]+$ ]] || return 1
	echo "$p"
}

url_for() { printf 'postgres://%s@127.0.0.1:%s/%s?sslmode=disable\n' "$ROLE" "$1" "$DB"; }

# Whether something listens on port $1. Only listening sockets count:
# connections in TIME-WAIT (left by a server that stopped with clients
# connected) do not keep PostgreSQL from binding (it sets SO_REUSEADDR), so
# they must not move the cluster to another port.
port_busy() {
	local p="$1"
	if command -v ss >/dev/null 2>&1; then
		[ -n "$(ss -Htln "( sport = :$p )" 2>/dev/null | head -n 1)" ] && return 0
		return 1
	fi
	# Fallback: does anything accept connections there?
	(exec 7<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null
}

next_free_port() {
	local p="$1" tries=0
	while port_busy "$p"; do
		p=$((p + 1)); tries=$((tries + 1))
		[ "$p" -le 65535 ] || p=20000
		[ "$tries" -lt 2000 ] || die "no free port found"
	done
	echo "$p"
}

write_conf() {
	local port="$1" sockdir durability
	sockdir="${CROOT//\'/\'\'}"
	if [ "${LOOKOUT_PG_DURABLE:-0}" = 1 ]; then
		durability="# LOOKOUT_PG_DURABLE=1: PostgreSQL's durable defaults.
fsync = on
synchronous_commit = on
full_page_writes = on
wal_level = replica"
	else
		durability="fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0"
	fi
	as_pg sh -c 'cat > "$1"' sh "$PGDATA_DIR/lookout.conf" <<EOF
# Written by scripts/pg.sh on every start; do not edit.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sockdir'
unix_socket_permissions = 0777
max_connections = 200
shared_buffers = 256MB
$durability
checkpoint_timeout = 30min
max_wal_size = 2GB
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
timezone = 'UTC'
EOF
}

init_cluster() {
	log "initialising cluster in $PGDATA_DIR"
	as_pg sh -c ': >> "$1"' sh "$CROOT/log"
	if ! as_pg "$PGBIN/initdb" -D "$PGDATA_DIR" -U "$ROLE" --auth=trust \
		-E UTF8 --no-locale --no-sync >>"$CROOT/log" 2>&1; then
		tail -n 30 "$CROOT/log" >&2 || true
		die "initdb failed (see $CROOT/log)"
	fi
	as_pg sh -c 'cat > "$1"' sh "$PGDATA_DIR/pg_hba.conf" <<'EOF'
# Throwaway test cluster (scripts/pg.sh): trust on the unix socket and loopback.
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
host    all          all   127.0.0.1/32   trust
local   replication  all                  trust
host    replication  all   127.0.0.1/32   trust
EOF
	as_pg sh -c 'printf "\ninclude_if_exists = %s\n" "'"'"'lookout.conf'"'"'" >> "$1"' sh "$PGDATA_DIR/postgresql.conf"
}

wait_ready() {
	local port="$1" deadline=$((SECONDS + START_TIMEOUT))
	until "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres -U "$ROLE" -t 2; do
		[ "$SECONDS" -lt "$deadline" ] || die "server not accepting connections on port $port after ${START_TIMEOUT}s (see $CROOT/log)"
		sleep 0.2
	done
}

ensure_db() {
	local port="$1" psql=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CROOT" -p "$port" -U "$ROLE")
	if [ "$("${psql[@]}" -d postgres -tAc "select 1 from pg_database where datname = '$DB'")" != 1 ]; then
		log "creating database $DB"
		"${psql[@]}" -d postgres -c "create database $DB owner $ROLE" >/dev/null
	fi
}

# --- commands --------------------------------------------------------------

cmd_start() {
	resolve_pgbin
	mkdir -p -- "$(dirname -- "$DIR")"

	# Serialise starts machine-wide (port choice + bind + initdb).
	(umask 000; : >> "$LOCK_FILE") 2>/dev/null || true
	exec 9<"$LOCK_FILE" || die "cannot open $LOCK_FILE"
	flock -w 300 9 || die "timed out waiting for $LOCK_FILE"

	choose_croot

	if is_running; then
		local port
		port="$(running_port)" || die "cluster in $PGDATA_DIR runs but its port is unknown"
		echo "$port" > "$DIR/port"
		wait_ready "$port"
		ensure_db "$port"
		url_for "$port" >&3
		return 0
	fi

	[ -f "$PGDATA_DIR/PG_VERSION" ] || init_cluster

	local want port attempt logsize newlog
	want="$(cat "$DIR/port" 2>/dev/null || true)"
	[[ "$want" =~ ^[0-9]+$ ]] || want="$DEFAULT_PORT"
	port="$(next_free_port "$want")"
	if [ "$port" != "$want" ] && [ "$want" != "$DEFAULT_PORT" ]; then
		port="$(next_free_port "$DEFAULT_PORT")"
	fi
	if [ "$port" != "$want" ]; then
		log "port $want is in use (something listens on 127.0.0.1:$want); using port $port instead"
	fi

	for attempt in 1 2 3 4 5 6 7 8 9 10; do
		write_conf "$port"
		logsize="$(stat -c %s -- "$CROOT/log" 2>/dev/null || echo 0)"
		log "starting server on 127.0.0.1:$port (socket in $CROOT, log $CROOT/log)"
		if as_pg "$PGBIN/pg_ctl" start -w -t "$START_TIMEOUT" -D "$PGDATA_DIR" -l "$CROOT/log" >/dev/null 2>&1; then
			break
		fi
		newlog="$(tail -c +"$((logsize + 1))" "$CROOT/log" 2>/dev/null || true)"
		if grep -qE 'could not (bind|create listen socket)|Address already in use|could not create any TCP/IP sockets' <<<"$newlog"; then
			log "port $port is taken, trying another"
			port="$(next_free_port "$((port + 1))")"
			continue
		fi
		printf '%s\n' "$newlog" | tail -n 30 >&2
		die "pg_ctl start failed (see $CROOT/log)"
	done
	is_running || die "could not start the server after several ports (see $CROOT/log)"
	if [ "$port" != "$want" ]; then
		log "the cluster runs on port $port, not $want (recorded in $DIR/port for the next start)"
	fi

	echo "$port" > "$DIR/port"
	wait_ready "$port"
	ensure_db "$port"
	url_for "$port" >&3
}

cmd_url() {
	resolve_pgbin
	existing_croot
	is_running || { log "no cluster running in $DIR (run: scripts/pg.sh start)"; exit 1; }
	url_for "$(running_port)" >&3
}

cmd_status() {
	resolve_pgbin
	existing_croot
	if is_running; then
		log "running: $(url_for "$(running_port)") (data $PGDATA_DIR)"
		exit 0
	fi
	log "not running ($DIR)"
	exit 3
}

cmd_stop() {
	[ -d "$DIR" ] || exit 0
	existing_croot
	[ -f "$PGDATA_DIR/PG_VERSION" ] || exit 0
	resolve_pgbin
	is_running || exit 0
	log "stopping server in $PGDATA_DIR"
	as_pg "$PGBIN/pg_ctl" stop -w -m fast -D "$PGDATA_DIR" >/dev/null
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
set_dir "${2:-}"
case "$1" in
	start) cmd_start ;;
	url) cmd_url ;;
	stop) cmd_stop ;;
	status) cmd_status ;;
	-h|--help|help) usage ;;
	*) usage ;;
esac
