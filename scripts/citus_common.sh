# Sourced by scripts/test_citus.sh and scripts/bench_citus.sh (ROOT set):
# finds shared/citus's build.sh and cluster.sh and builds Citus when it is
# missing.
#
#   citus_scripts      sets CITUS_SCRIPTS: LOOKOUT_CITUS_SCRIPTS, or shared/citus
#                      beside the checkout, or beside its parent for a worktree
#   citus_build        runs build.sh TAG on CITUS_GIT_DIR (default: the fetched
#                      mirror .mirror/citusdata+citus/repo beside shared/, else a
#                      shallow bare clone of the tag into .data/citus-src.git);
#                      a no-op when installed, about 6 minutes otherwise
CITUS_TAG=v13.2.2

citus_scripts() {
	CITUS_SCRIPTS="${LOOKOUT_CITUS_SCRIPTS:-}"
	if [ -z "$CITUS_SCRIPTS" ]; then
		local d
		for d in "$ROOT/../shared/citus" "$ROOT/../../shared/citus"; do
			if [ -x "$d/cluster.sh" ]; then
				CITUS_SCRIPTS="$(cd "$d" && pwd -P)"
				break
			fi
		done
	fi
	if [ -z "$CITUS_SCRIPTS" ] || [ ! -x "$CITUS_SCRIPTS/cluster.sh" ] || [ ! -x "$CITUS_SCRIPTS/build.sh" ]; then
		echo "$(basename "$0"): no build.sh and cluster.sh found (set LOOKOUT_CITUS_SCRIPTS to shared/citus)" >&2
		exit 2
	fi
}

citus_build() {
	echo "== Citus $CITUS_TAG ($CITUS_SCRIPTS/build.sh; a no-op when installed, about 6 minutes otherwise)"
	local git_dir="${CITUS_GIT_DIR:-}" mirror
	if [ -z "$git_dir" ]; then
		mirror="$(cd "$CITUS_SCRIPTS/../.." && pwd -P)/.mirror/citusdata+citus/repo"
		if [ -d "$mirror" ]; then
			git_dir="$mirror"
		else
			git_dir="$ROOT/.data/citus-src.git"
			if [ ! -d "$git_dir" ]; then
				git clone --quiet --bare --depth 1 --branch "$CITUS_TAG" https://github.com/citusdata/citus.git "$git_dir"
			fi
		fi
	fi
	"$CITUS_SCRIPTS/build.sh" "$git_dir" "$CITUS_TAG"
}

# citus_lock DIR: holds, for the rest of the script, a lock on the cluster
# directory DIR (the file DIR.lock beside it), or exits 1 naming the run
# that holds it. Taken before the script traps its exit: a second run on
# one directory would otherwise find the first's cluster stopping, fail to
# start it, and its cleanup stop the cluster under the first run's tests.
citus_lock() {
	local dir="$1"
	mkdir -p "$(dirname -- "$dir")"
	exec 9>>"$dir.lock"
	if ! flock -n 9; then
		echo "$(basename -- "$0"): another run uses the cluster directory $dir (lock $dir.lock held); wait for it, or set another directory" >&2
		exit 1
	fi
}
