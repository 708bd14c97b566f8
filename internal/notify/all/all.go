// Package all links every sink type lookout ships. Import it for its side
// effect where sinks are built or their keys checked: the evaluator and
// the api. Adding a sink type is its package under internal/notify and one
// line here.
package all

import (
	_ "github.com/lookout-dev/lookout/internal/notify/command"
	_ "github.com/lookout-dev/lookout/internal/notify/email"
	_ "github.com/lookout-dev/lookout/internal/notify/log"
	_ "github.com/lookout-dev/lookout/internal/notify/slack"
	_ "github.com/lookout-dev/lookout/internal/notify/url"
	_ "github.com/lookout-dev/lookout/internal/notify/webhook"
)
