// Package all links every connector lookout ships. Import it for its side
// effect where sources are built or their blocks checked: the syncer and
// its config check. Adding a connector is its package and one line here.
package all

import (
	_ "github.com/lookout-dev/lookout/internal/connectors/file"
	_ "github.com/lookout-dev/lookout/internal/connectors/github"
	_ "github.com/lookout-dev/lookout/internal/connectors/httpjson"
	_ "github.com/lookout-dev/lookout/internal/connectors/imap"
	_ "github.com/lookout-dev/lookout/internal/connectors/notion"
	_ "github.com/lookout-dev/lookout/internal/connectors/postgres"
	_ "github.com/lookout-dev/lookout/internal/connectors/rss"
	_ "github.com/lookout-dev/lookout/internal/connectors/web"
)
