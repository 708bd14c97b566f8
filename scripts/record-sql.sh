#!/usr/bin/env bash
# Records the SQL lookout's binaries send into
# migrations/testdata/release-NAME.sql: the statements the migrations after
# release NAME must keep working (docs/development.md, "Cutting a release";
# docs/deploy.md, "Schema compatibility").
#
#   scripts/record-sql.sh NAME [go test flags...]     e.g. scripts/record-sql.sh v0.2.0
#
# It runs the whole suite through scripts/test.sh (the same environment: a
# throwaway PostgreSQL unless TEST_DATABASE_URL is set) with
# LOOKOUT_RECORD_SQL naming a temporary directory, where every test process
# writes the statements it saw to a file of its own, then merges them
# (go run ./internal/pgtest/recordsql). A failing suite writes nothing: its
# recording would miss statements. Run it on the release's commit, before
# adding the release to migrations.Releases (the suite still checks the
# previous release's file).
set -euo pipefail

NAME="${1:?usage: scripts/record-sql.sh NAME [go test flags...] (NAME: the release tag, such as v0.2.0)}"
shift
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
echo "== recording the SQL of $NAME into $DIR"
LOOKOUT_RECORD_SQL="$DIR" bash scripts/test.sh "$@"
go run ./internal/pgtest/recordsql -release "$NAME" -out "migrations/testdata/release-$NAME.sql" "$DIR"
