// Package all registers every connector lookout ships. Import it for its
// side effect wherever sources are built: the syncer, and the config check
// of both binaries.
package all

import (
	// Registered connectors, one per config.Connectors entry.
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/github"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	_ "github.com/lookout-dev/lookout/internal/connectors/rss"
)
