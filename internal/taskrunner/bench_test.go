package taskrunner_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkTasksAtNotionBudget measures tasks claimed, executed and
// completed per minute against the fake Notion API held to Notion's
// request budget — 3 requests per second, burst 3, for the host (shared
// through host_limits) and for the source — and the requests each task
// costs. One pass takes every task (take: 30) so that the budget, not
// the schedule, is the limit; the agent answers at once.
//
//	go test ./internal/taskrunner/ -run '^$' -bench TasksAtNotionBudget -benchtime 1x
func BenchmarkTasksAtNotionBudget(b *testing.B) {
	const n = 30
	for range b.N {
		b.StopTimer()
		w := newWorld(b, options{mode: modeOK, rate: "{per_second: 3, burst: 3}",
			task:    fmt.Sprintf("name: execute\n    when: record.status == \"Todo\"\n    take: %d\n    lease: 10m\n    timeout: 1m\n", n),
			lookout: "hosts:\n  \"FAKE_HOST\": {per_second: 3, burst: 3}\n"})
		for i := range n {
			w.addTask(fmt.Sprintf("task %d", i), float64(i))
		}
		rep := w.replica("syncer-1", nil, nil)
		start := time.Now()
		b.StartTimer()
		w.mirror(rep)
		rep.runner.Once(context.Background())
		b.StopTimer()
		took := time.Since(start)
		done := 0
		for _, r := range w.runs() {
			if r.Status == "completed" && r.ToolAction == "" {
				done++
			}
		}
		if done != n || len(w.agent.calls(b)) != n {
			b.Fatalf("%d of %d tasks completed, %d executions", done, n, len(w.agent.calls(b)))
		}
		reqs := len(w.fake.Requests())
		b.ReportMetric(float64(n)/took.Minutes(), "tasks/min")
		b.ReportMetric(float64(reqs)/n, "requests/task")
		b.ReportMetric(float64(reqs)/took.Seconds(), "requests/s")
		b.Logf("%d tasks in %s: %d requests (%d PATCH, %d page GET, %d query, %d schema)", n, took.Round(time.Millisecond), reqs,
			w.fake.Count("PATCH", ""), w.fake.Count("GET", "")-w.fake.Count("GET", w.fake.DatabaseID[len(w.fake.DatabaseID)-12:]),
			w.fake.Count("POST", "/query"), w.fake.Count("GET", w.fake.DatabaseID[len(w.fake.DatabaseID)-12:]))
		b.StartTimer()
	}
}
