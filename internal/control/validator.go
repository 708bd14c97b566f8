package control

import (
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	_ "github.com/lookout-dev/lookout/internal/connectors/all" // the decoders and constructors of the validation path
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// NewValidator returns the validator of definitions made through the api
// (HTTP, MCP, the admin page): the one validation path, the code `check`
// and the config loader run on a file. config.ParseSource checks the
// source's keys, schedule, expressions and sinks, and its connector block
// with the connector's own decoder (the connectors are linked);
// connectors.Check builds the connector without I/O, as `syncer check`
// does (the block's expressions, its URL); watchspec.Check compiles the
// watches (expressions, model options, templates, digest briefings) as
// `evaluator check` does, without the evaluator. g holds lookout.yaml's
// defaults and sinks.
func NewValidator(g *config.Global) *definitions.Validator {
	return &definitions.Validator{Global: g, Checks: []definitions.Check{connectors.Check, watchspec.Check}}
}
