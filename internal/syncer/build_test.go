package syncer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// Errors found while building a source name the key that caused them,
// classified by their type: a field expression at its fields key, a
// schedule problem at its schedule key.
func TestBuildErrorsNameTheirKey(t *testing.T) {
	t.Parallel()
	nop := func(context.Context, connectors.Env, json.RawMessage, connectors.EmitFunc) (connectors.Result, error) {
		return connectors.Result{}, nil
	}
	tests := []struct {
		name, body string
		edit       func(cfg *config.Source)
		want       string
	}{
		// config.Load refuses these already (with the same keys); the
		// edits after loading check that Build locates them too.
		{name: "field expression", body: "fields:\n  status: item.state\n  title: item.title\n",
			edit: func(sc *config.Source) { sc.Fields.Title = "item.(" },
			want: "sources/s.yaml:6: fields.title "},
		{name: "extra field expression", body: "fields:\n  extra:\n    team: item.team\n",
			edit: func(sc *config.Source) { sc.Fields.Extra["team"] = "item.(" },
			want: "sources/s.yaml:6: fields.extra.team "},
		{name: "volatile path", body: "volatile: [id]\n",
			edit: func(sc *config.Source) { sc.Volatile = []string{"nope"} },
			want: `sources/s.yaml:4: volatile "nope" is not a record field`},
		// A cron expression carrying its zone is refused at the cron key,
		// though the message mentions timezone.
		{name: "cron with a zone", body: "every: 0s\ncron: \"0 8 * * *\"\n",
			edit: func(sc *config.Source) { sc.Cron = "TZ=Europe/Paris 0 8 * * *" },
			want: `sources/s.yaml:5: cron "TZ=Europe/Paris 0 8 * * *": set the zone with timezone`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := loadConfig(t, "", map[string]string{"s": tt.body}, map[string]fetchFunc{"s": nop})
			if tt.edit != nil {
				tt.edit(cfg.Sources[0])
			}
			err := Build(cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to start with %q", err, tt.want)
			}
		})
	}
}
