// Package migrations holds lookout's SQL schema as golang-migrate files,
// embedded into the binaries so that `migrate` needs nothing on disk.
package migrations

import "embed"

// FS holds every NNNN_name.up.sql / NNNN_name.down.sql pair.
//
//go:embed *.sql
var FS embed.FS

// Release is a released version of lookout and the schema its binaries
// embed.
type Release struct {
	// Name is the release's tag, such as v0.1.0.
	Name string
	// Schema is the newest migration the release ships.
	Schema uint
}

// Releases lists lookout's releases, oldest first. Cutting a release
// appends one and records the SQL its binaries send in
// testdata/release-<name>.sql (`make record-sql RELEASE=<name>`,
// docs/development.md, "Cutting a release"). The migrations after the
// last release must keep every one of those statements working: that is
// the rule rolling upgrades rely on (docs/deploy.md, "Schema
// compatibility"), checked by TestPreviousReleaseRunsOnLatestSchema.
var Releases = []Release{
	// The first release: every migration up to 25.
	{Name: "v0.1.0", Schema: 25},
}
