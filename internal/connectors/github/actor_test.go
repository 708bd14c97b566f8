package github_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/conntest"
	"github.com/lookout-dev/lookout/internal/connectors/github/githubtest"
)

func actor(t *testing.T, f *githubtest.Server, task string) connectors.Actor {
	t.Helper()
	a, ok := build(t, f, "  task: "+task+"\n").(connectors.Actor)
	if !ok {
		t.Fatal("the github connector does not implement connectors.Actor")
	}
	return a
}

func ghClaim(run string) connectors.Claim {
	at := time.Now().UTC().Truncate(time.Second)
	return connectors.Claim{RunID: run, By: "lookout@host-1", At: at, ExpiresAt: at.Add(30 * time.Minute)}
}

// With claim: comment, labels carry the status and a comment the claim;
// other labels stay; retries comment once.
func TestGitHubActorWithComments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := githubtest.New(t)
	f.Seed(2)
	is := f.Get(1)
	is.Labels = []string{"bug", "todo"}
	f.Put(is)
	a := actor(t, f, "{}")

	cl := ghClaim("run-7")
	for range 2 { // a retried claim leaves the issue as one did
		if err := a.Claim(ctx, "1", cl); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Get(1).Labels; !slices.Equal(got, []string{"bug", "in-progress"}) {
		t.Errorf("labels after claim = %v", got)
	}
	if c := f.Comments(1); len(c) != 1 || !strings.Contains(c[0], "Claimed by lookout@host-1 for run run-7") {
		t.Errorf("comments = %q, want one claim comment", c)
	}
	if ok, err := a.Confirm(ctx, "1", cl); err != nil || !ok {
		t.Fatalf("Confirm = %v, %v", ok, err)
	}
	// Another run does not claim over this claim, nor end it.
	if err := a.Claim(ctx, "1", ghClaim("run-8")); !errors.Is(err, connectors.ErrMoved) {
		t.Errorf("claim over another run's claim = %v, want ErrMoved", err)
	}
	if err := a.Release(ctx, "1", ghClaim("run-8"), connectors.Outcome{Error: "x"}); !errors.Is(err, connectors.ErrMoved) {
		t.Errorf("release of another run's claim = %v, want ErrMoved", err)
	}
	if ok, err := a.Confirm(ctx, "1", cl); err != nil || !ok {
		t.Errorf("Confirm after another run's refused claim = %v, %v; want true", ok, err)
	}
	if err := a.Complete(ctx, "1", cl, connectors.Outcome{At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := f.Get(1).Labels; !slices.Equal(got, []string{"bug", "done"}) {
		t.Errorf("labels after complete = %v", got)
	}

	cl2 := ghClaim("run-9")
	if err := a.Claim(ctx, "2", cl2); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Fail(ctx, "2", cl2, connectors.Outcome{Error: "exit status 2", RetryCount: 3}); err != nil {
			t.Fatal(err)
		}
	}
	c := f.Comments(2)
	if got := f.Get(2).Labels; !slices.Equal(got, []string{"bug", "failed"}) || len(c) != 2 || !strings.Contains(c[1], "Run run-9 failed after 3 attempts: exit status 2") {
		t.Errorf("after fail: labels %v, comments %q", got, c)
	}
}

// With claim: assignee, the claim is the assignee; a person who takes the
// label off between claim and confirm makes Confirm false.
func TestGitHubActorWithAssignee(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := githubtest.New(t)
	f.Seed(1)
	a := actor(t, f, "{claim: assignee, assignee: lookout-bot, todo: ready}")
	cl := ghClaim("run-1")
	if err := a.Claim(ctx, "1", cl); err != nil {
		t.Fatal(err)
	}
	if is := f.Get(1); !slices.Equal(is.Assignees, []string{"lookout-bot"}) || !slices.Contains(is.Labels, "in-progress") {
		t.Errorf("after claim: %+v", is)
	}
	if ok, err := a.Confirm(ctx, "1", cl); err != nil || !ok {
		t.Fatalf("Confirm = %v, %v", ok, err)
	}
	is := f.Get(1)
	is.Labels = []string{"bug", "ready"} // a person moves it back
	f.Put(is)
	if ok, err := a.Confirm(ctx, "1", cl); err != nil || ok {
		t.Errorf("Confirm after a person moved the issue = %v, %v; want false", ok, err)
	}
	if err := a.Claim(ctx, "1", cl); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, "1", cl, connectors.Outcome{Error: "timed out", RetryCount: 1}); err != nil {
		t.Fatal(err)
	}
	is = f.Get(1)
	if !slices.Equal(is.Labels, []string{"bug", "ready"}) || len(is.Assignees) != 0 {
		t.Errorf("after release: labels %v assignees %v", is.Labels, is.Assignees)
	}
	if c := f.Comments(1); len(c) != 1 || !strings.Contains(c[0], "released the task (retry 1): timed out") {
		t.Errorf("comments = %q", c)
	}
	if ok, err := a.Confirm(ctx, "99", cl); err != nil || ok {
		t.Errorf("Confirm of a missing issue = %v, %v", ok, err)
	}
	if err := a.Claim(ctx, "99", cl); !errors.Is(err, connectors.ErrNotFound) {
		t.Errorf("Claim of a missing issue = %v, want ErrNotFound", err)
	}
	f.Mu.Lock()
	f.Token = "ghp_other"
	f.Mu.Unlock()
	if err := a.Claim(ctx, "1", cl); !errors.Is(err, connectors.ErrUnauthorized) {
		t.Errorf("Claim with a refused token = %v, want ErrUnauthorized", err)
	}
}

func TestGitHubTaskBlockErrors(t *testing.T) {
	t.Parallel()
	const head = "name: s\nconnector: github\ngithub:\n  repo: a/b\n"
	cases := []struct{ src, want string }{
		{head + "  task: {claim: assignee}\n", "sources/s.yaml:5: github.task.assignee is required with claim: assignee (the login to assign)"},
		{head + "  task: {claim: label}\n", `sources/s.yaml:5: github.task.claim must be comment or assignee, not "label"`},
		{head + "  task: {todo: done}\n", `sources/s.yaml:5: github.task.complete "done" is also task.todo: the four states need four labels`},
	}
	for _, tc := range cases {
		_, err := conntest.LoadSource(t, tc.src)
		if err == nil || err.Error() != tc.want {
			t.Errorf("source\n%s\nerror = %v\nwant %q", tc.src, err, tc.want)
		}
	}
}

// A person who moved the issue (closed it, labelled it done) is never
// written over: the claim and the ends return ErrMoved and change no label.
func TestGitHubActorLeavesAPersonsMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := githubtest.New(t)
	f.Seed(2)
	a := actor(t, f, "{}")
	is := f.Get(1)
	is.Labels = []string{"bug", "done"} // a person did it
	f.Put(is)
	if err := a.Claim(ctx, "1", ghClaim("run-1")); !errors.Is(err, connectors.ErrMoved) || !strings.Contains(err.Error(), "labelled done, not todo") {
		t.Errorf("claim of an issue labelled done: %v", err)
	}
	cl := ghClaim("run-2")
	if err := a.Claim(ctx, "2", cl); err != nil {
		t.Fatal(err)
	}
	is = f.Get(2)
	is.State = "closed" // a person closed it while it ran
	f.Put(is)
	for name, end := range map[string]func() error{
		"complete": func() error { return a.Complete(ctx, "2", cl, connectors.Outcome{}) },
		"fail":     func() error { return a.Fail(ctx, "2", cl, connectors.Outcome{Error: "x"}) },
		"release":  func() error { return a.Release(ctx, "2", cl, connectors.Outcome{Error: "x"}) },
	} {
		if err := end(); !errors.Is(err, connectors.ErrMoved) {
			t.Errorf("%s of a closed issue: %v, want ErrMoved", name, err)
		}
	}
	if l1, l2 := f.Get(1).Labels, f.Get(2).Labels; !slices.Equal(l1, []string{"bug", "done"}) || !slices.Equal(l2, []string{"bug", "in-progress"}) {
		t.Errorf("labels: %v, %v; want the person's", l1, l2)
	}
}
