// Package migrations holds lookout's SQL schema as golang-migrate files,
// embedded into the binaries so that `migrate` needs nothing on disk.
package migrations

import "embed"

// FS holds every NNNN_name.up.sql / NNNN_name.down.sql pair.
//
//go:embed *.sql
var FS embed.FS
