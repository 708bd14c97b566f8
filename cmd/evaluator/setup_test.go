package main

import (
	"context"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// Once the directory is applied the evaluator runs on the definitions:
// it holds no second parse of the directory's sources (at 100,000
// watches that copy was a third of the process's heap).
func TestSetupHoldsNoCopyOfTheDirectorysSources(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	dir := conntest.WriteConfig(t, map[string]string{
		"lookout.yaml":       "sinks:\n  log: {type: log}\n",
		"sources/tasks.yaml": "name: tasks\nconnector: file\nfile: {paths: [tasks.jsonl]}\nwatches:\n  - name: open\n    when: record.status == \"open\"\n    notify: [log]\n",
	})
	var p *parts
	code := cli.Run(context.Background(), "evaluator", "test", []cli.Command{{Name: "setup", Run: func(ctx context.Context, env *cli.Env) error {
		var err error
		p, err = setup(ctx, env, metrics.New())
		if err == nil {
			p.pool.Close()
		}
		return err
	}}}, []string{"--config", dir, "setup"}, t.Output(), t.Output())
	if code != 0 || p == nil {
		t.Fatalf("setup: exit %d", code)
	}
	if p.follower.Version() == 0 {
		t.Error("the follower loaded no definitions")
	}
	if n := len(p.cfg.Sources); n != 0 {
		t.Errorf("setup holds %d parsed sources of the directory beside the definitions', want 0", n)
	}
}
