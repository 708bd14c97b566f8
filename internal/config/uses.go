package config

import (
	"reflect"
	"regexp"
	"strings"
)

// Uses is what a daemon uses of the sources it reads. The ${ENV}
// references of the parts it does not use are left as written: neither
// expanded nor required, so that a daemon needs only its own side's
// secrets (docs/deploy.md#secrets).
type Uses uint8

const (
	// UsesAll expands every reference, and an unset one is an error: the
	// syncer (connectors, task executors), the api (it validates what it
	// stores; its ingest reads webhook blocks with ParseWebhook) and
	// `check` of those.
	UsesAll Uses = iota
	// UsesWatches is the evaluator's side: watches, fields and schedules.
	// It never uses a source's credentials, so the connector's block
	// (checked by no connector either), webhook.secret (the api's ingest
	// verifies signatures) and the secret and headers of task webhook
	// executors (the syncer's task runner) keep their ${ENV} references,
	// and the sealed credentials of definitions made through the API are
	// not opened (definitions.Validator).
	UsesWatches
)

// taskSecretRE matches the key paths of a task webhook executor's secret
// and headers.
var taskSecretRE = regexp.MustCompile(`^tasks\[\d+\]\.webhook\.(secret|headers(\..*)?)$`)

// sourceFields are the top-level keys of a source that are not a
// connector's block.
var sourceFields = yamlFields(reflect.TypeOf(Source{}))

// leaves reports whether the key path of a source keeps its ${ENV}
// references as written under u.
func (u Uses) leaves(path string) bool {
	if u != UsesWatches {
		return false
	}
	top := path
	if i := strings.IndexAny(top, ".["); i >= 0 {
		top = top[:i]
	}
	if _, ok := sourceFields[top]; !ok {
		return true // a connector's block
	}
	return path == "webhook.secret" || taskSecretRE.MatchString(path)
}

// Uses is what the daemon that loaded g uses of the sources (LoadFor):
// the definitions it parses with g are read the same way.
func (g *Global) Uses() Uses { return g.uses }

// SetUses makes the sources parsed with g read as uses says: for a
// Global that LoadFor did not make (tests, a Global built in code).
func (g *Global) SetUses(u Uses) { g.uses = u }
