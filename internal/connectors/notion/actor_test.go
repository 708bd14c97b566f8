package notion_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/connectors/notion/notiontest"
)

func claimAt(clk *clock, run string) connectors.Claim {
	at := clk.now()
	return connectors.Claim{RunID: run, By: "lookout@host-1", At: at, ExpiresAt: at.Add(30 * time.Minute)}
}

// Claim writes the visible claim, Confirm reads it back, Complete moves
// the card to Complete with CompletedAt and no LastError; Fail and Release
// write their states; every write is one PATCH and every call idempotent.
func TestActorLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 3)
	conn := build(t, f, clk, "  task: {}\n")

	cl := claimAt(clk, "run-17")
	if err := conn.Claim(ctx, ids[0], cl); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"Status": "InProgress", "ClaimedBy": "lookout@host-1", "ClaimedAt": "2026-03-02T09:03:00Z",
		"ClaimExpiresAt": "2026-03-02T09:33:00Z", "RunId": "run-17"}
	for p, w := range want {
		if got := f.Value(ids[0], p); got != w {
			t.Errorf("after claim %s = %v, want %v", p, got, w)
		}
	}
	// A retried claim leaves the page as one claim did.
	if err := conn.Claim(ctx, ids[0], cl); err != nil {
		t.Fatal(err)
	}
	ok, err := conn.Confirm(ctx, ids[0], cl)
	if err != nil || !ok {
		t.Fatalf("Confirm = %v, %v; want true", ok, err)
	}
	// Another run's claim is not this one.
	if ok, err := conn.Confirm(ctx, ids[0], connectors.Claim{RunID: "run-18"}); err != nil || ok {
		t.Errorf("Confirm of another run = %v, %v; want false", ok, err)
	}
	clk.add(5 * time.Minute)
	if err := conn.Complete(ctx, ids[0], cl, connectors.Outcome{At: clk.now()}); err != nil {
		t.Fatal(err)
	}
	if s, at, le := f.Value(ids[0], "Status"), f.Value(ids[0], "CompletedAt"), f.Value(ids[0], "LastError"); s != "Complete" || at != "2026-03-02T09:08:00Z" || le != "" {
		t.Errorf("after complete: Status %v, CompletedAt %v, LastError %q", s, at, le)
	}

	// A recoverable failure releases the task: back to Todo, claim cleared.
	cl2 := claimAt(clk, "run-19")
	if err := conn.Claim(ctx, ids[1], cl2); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 2500)
	if err := conn.Release(ctx, ids[1], cl2, connectors.Outcome{At: clk.now(), Error: long, RetryCount: 1}); err != nil {
		t.Fatal(err)
	}
	for p, w := range map[string]any{"Status": "Todo", "RetryCount": float64(1), "ClaimedBy": "", "ClaimedAt": nil, "ClaimExpiresAt": nil, "RunId": ""} {
		if got := f.Value(ids[1], p); got != w {
			t.Errorf("after release %s = %v, want %v", p, got, w)
		}
	}
	if le := f.Value(ids[1], "LastError").(string); len([]rune(le)) != 2000 || !strings.HasSuffix(le, "…") {
		t.Errorf("LastError is %d characters; want the error cut to Notion's 2000", len([]rune(le)))
	}
	if ok, err := conn.Confirm(ctx, ids[1], cl2); err != nil || ok {
		t.Errorf("Confirm after release = %v, %v; want false", ok, err)
	}

	// A non-recoverable failure is Failed with its error.
	cl3 := claimAt(clk, "run-20")
	if err := conn.Claim(ctx, ids[2], cl3); err != nil {
		t.Fatal(err)
	}
	if err := conn.Fail(ctx, ids[2], cl3, connectors.Outcome{At: clk.now(), Error: "executor exited 2: no such file", RetryCount: 3}); err != nil {
		t.Fatal(err)
	}
	if s, le, rc := f.Value(ids[2], "Status"), f.Value(ids[2], "LastError"), f.Value(ids[2], "RetryCount"); s != "Failed" || le != "executor exited 2: no such file" || rc != float64(3) {
		t.Errorf("after fail: Status %v, LastError %v, RetryCount %v", s, le, rc)
	}
	// One schema read; a read before each action, then one PATCH per
	// write (none for the retried claim, which had landed); one GET per
	// confirm.
	if g, p, c := f.Count("GET", "/v1/databases/"+strings.ReplaceAll(f.DatabaseID, "-", "")), f.Count("PATCH", ""), f.Count("GET", ""); g != 1 || p != 6 || c != 11 {
		t.Errorf("requests: %d schema reads, %d PATCH, %d GET; want 1, 6, 11 (the schema read, seven reads before actions, three confirms)", g, p, c)
	}
}

// A person moves the card between the claim and its confirmation: Confirm
// reports false (the run is lost, not executed). So does a card archived.
func TestConfirmSeesACardMovedByAPerson(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 2)
	conn := build(t, f, clk, "  task: {}\n")
	cl := claimAt(clk, "run-1")
	if err := conn.Claim(ctx, ids[0], cl); err != nil {
		t.Fatal(err)
	}
	f.Edit(ids[0], map[string]any{"Status": notiontest.Status("Todo")}) // a person drags it back
	if ok, err := conn.Confirm(ctx, ids[0], cl); err != nil || ok {
		t.Errorf("Confirm after a person moved the card = %v, %v; want false", ok, err)
	}

	if err := conn.Claim(ctx, ids[1], cl); err != nil {
		t.Fatal(err)
	}
	f.Archive(ids[1])
	if ok, err := conn.Confirm(ctx, ids[1], cl); err != nil || ok {
		t.Errorf("Confirm of an archived card = %v, %v; want false", ok, err)
	}
	if ok, err := conn.Confirm(ctx, "00000000-0000-4000-8000-000000000000", cl); err != nil || ok {
		t.Errorf("Confirm of a page that does not exist = %v, %v; want false", ok, err)
	}
	if err := conn.Claim(ctx, "00000000-0000-4000-8000-000000000000", cl); !errors.Is(err, connectors.ErrNotFound) {
		t.Errorf("Claim of a page that does not exist = %v, want ErrNotFound", err)
	}
}

// A status value that is not one of the property's options is refused
// before anything is written, with an error that names the property, the
// value and the options; a task property of the wrong type likewise.
func TestStatusValueThatIsNotAnOption(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 1)
	conn := build(t, f, clk, "  task:\n    in_progress: Doing\n")
	err := conn.Claim(ctx, ids[0], claimAt(clk, "run-1"))
	want := `sources/tasks.yaml:9: notion.task.in_progress property "Status" has no option "Doing" (options: Todo, InProgress, Complete, Failed)`
	if err == nil || err.Error() != want {
		t.Errorf("error =\n%v\nwant\n%s", err, want)
	}
	var ve *connectors.ValidationError
	if !errors.As(err, &ve) || ve.Property != "Status" || ve.Value != "Doing" {
		t.Errorf("error is not a *ValidationError for Status: %#v", err)
	}
	if n := f.Count("PATCH", ""); n != 0 {
		t.Errorf("%d PATCH sent", n)
	}
	// The first run of the mirror reports it too.
	if r := fetchErr(t, conn); r == nil || !strings.Contains(r.Error(), `no option "Doing"`) {
		t.Errorf("fetch error = %v", r)
	}

	f2, clk2 := setup(t, taskProps()...)
	conn2 := build(t, f2, clk2, "  task:\n    retry_count: LastError\n    claimed_by: Owner\n")
	err = conn2.Verify(ctx)
	for _, w := range []string{
		`sources/tasks.yaml:10: notion.task.claimed_by names property "Owner", which database`,
		`sources/tasks.yaml:9: notion.task.retry_count names property "LastError", a rich_text property; it must be number`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error = %v\nwant it to contain %s", err, w)
		}
	}
	// Defaults the database lacks are skipped, not errors.
	f3, clk3 := setup(t, notiontest.Property{Name: "Name", Type: "title"},
		notiontest.Property{Name: "Status", Type: "select", Options: []string{"Todo", "InProgress", "Complete", "Failed"}})
	id := f3.AddPage(map[string]any{"Name": notiontest.Title("t"), "Status": notiontest.Select("Todo")})
	conn3 := build(t, f3, clk3, "  task: {}\n")
	cl := claimAt(clk3, "run-1")
	if err := conn3.Claim(ctx, id, cl); err != nil {
		t.Fatal(err)
	}
	if ok, err := conn3.Confirm(ctx, id, cl); err != nil || !ok || f3.Value(id, "Status") != "InProgress" {
		t.Errorf("select status: Confirm %v %v, Status %v", ok, err, f3.Value(id, "Status"))
	}
}

// The API's own validation errors become *ValidationError with Notion's
// message; 429 and 529 a *RetryLaterError.
func TestActorErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 1)
	conn := build(t, f, clk, "  task: {}\n")
	if err := conn.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	f.FailNext(1, 529, 12)
	err := conn.Claim(ctx, ids[0], claimAt(clk, "run-1"))
	var rl *connectors.RetryLaterError
	if !errors.As(err, &rl) || !rl.RetryAt.Equal(clk.now().Add(12*time.Second)) || !strings.Contains(err.Error(), "service_overload") {
		t.Errorf("529: %v", err)
	}
	// The claim was not written; the retry writes it.
	if f.Value(ids[0], "Status") != "Todo" {
		t.Error("a refused claim changed the page")
	}
	if err := conn.Claim(ctx, ids[0], claimAt(clk, "run-1")); err != nil {
		t.Fatal(err)
	}
	// A page archived after the read the write is conditional on: Notion
	// refuses the write.
	f.On(notiontest.Rule{Method: "GET", Page: ids[0], Archive: true})
	err = conn.Complete(ctx, ids[0], claimAt(clk, "run-1"), connectors.Outcome{At: clk.now()})
	var ve *connectors.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "Can't edit block that is archived") {
		t.Errorf("archived: %v", err)
	}
	// Archived before the read: nothing is written, the page is gone.
	if err := conn.Release(ctx, ids[0], claimAt(clk, "run-1"), connectors.Outcome{At: clk.now()}); !errors.Is(err, connectors.ErrNotFound) {
		t.Errorf("release of an archived page: %v, want ErrNotFound", err)
	}
	// A source without a task block does not act.
	plain := build(t, f, clk, "")
	if err := plain.Claim(ctx, ids[0], claimAt(clk, "run-1")); err == nil || !strings.Contains(err.Error(), "notion has no task: block") {
		t.Errorf("claim without task block: %v", err)
	}
}

func fetchErr(t *testing.T, c connectors.Connector) error {
	t.Helper()
	_, err := c.Fetch(context.Background(), nil, func(context.Context, connectors.Page) error { return nil })
	return err
}

// Every action reads the page first and writes only over what lookout
// left there: a claim only over Todo, an end only over its own claim
// (status and RunId). A person's status is never written over; the action
// returns ErrMoved and sends no PATCH. An end that had landed is a
// success without a write.
func TestActorsWriteOnlyOverTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, clk := setup(t, taskProps()...)
	ids := addTasks(f, clk, 3)
	conn := build(t, f, clk, "  task: {}\n")
	outcome := connectors.Outcome{At: clk.now(), Error: "boom", RetryCount: 1}

	// A person completed the card before the claim.
	f.Edit(ids[0], map[string]any{"Status": notiontest.Status("Complete")})
	cl := claimAt(clk, "run-1")
	if err := conn.Claim(ctx, ids[0], cl); !errors.Is(err, connectors.ErrMoved) || !strings.Contains(err.Error(), `it shows "Complete", not "Todo"`) {
		t.Errorf("claim over a person's Complete: %v", err)
	}
	// A person moved the card while it was claimed: no end writes over it.
	cl2 := claimAt(clk, "run-2")
	if err := conn.Claim(ctx, ids[1], cl2); err != nil {
		t.Fatal(err)
	}
	f.Edit(ids[1], map[string]any{"Status": notiontest.Status("Todo")})
	for name, end := range map[string]func() error{
		"complete": func() error { return conn.Complete(ctx, ids[1], cl2, outcome) },
		"fail":     func() error { return conn.Fail(ctx, ids[1], cl2, outcome) },
	} {
		if err := end(); !errors.Is(err, connectors.ErrMoved) {
			t.Errorf("%s after a person moved the card: %v, want ErrMoved", name, err)
		}
	}
	// It shows Todo already: a release has nothing to write.
	if err := conn.Release(ctx, ids[1], cl2, outcome); err != nil {
		t.Errorf("release after a person moved the card to Todo: %v", err)
	}
	// Another run's claim is not this one's.
	cl3 := claimAt(clk, "run-3")
	if err := conn.Claim(ctx, ids[2], cl3); err != nil {
		t.Fatal(err)
	}
	if err := conn.Release(ctx, ids[2], claimAt(clk, "run-4"), outcome); !errors.Is(err, connectors.ErrMoved) ||
		!strings.Contains(err.Error(), `under run "run-3"`) {
		t.Errorf("release under another run: %v", err)
	}
	if n := f.Count("PATCH", ""); n != 2 {
		t.Errorf("%d PATCH sent, want the two claims", n)
	}
	// Its own: written once; again, nothing more is sent.
	for range 2 {
		if err := conn.Release(ctx, ids[2], cl3, outcome); err != nil {
			t.Fatal(err)
		}
	}
	if s, rc, n := f.Value(ids[2], "Status"), f.Value(ids[2], "RetryCount"), f.Count("PATCH", ""); s != "Todo" || rc != float64(1) || n != 3 {
		t.Errorf("after release: Status %v, RetryCount %v, %d PATCH", s, rc, n)
	}
	// A release of a claim that never landed writes nothing.
	if err := conn.Release(ctx, ids[2], claimAt(clk, "run-5"), outcome); err != nil || f.Count("PATCH", "") != 3 {
		t.Errorf("release of a claim that never landed: %v, %d PATCH", err, f.Count("PATCH", ""))
	}
	for _, id := range ids[:2] {
		if s := f.Value(id, "Status"); s != map[string]any{ids[0]: "Complete", ids[1]: "Todo"}[id] {
			t.Errorf("page %s: Status %v, want the person's", id, s)
		}
	}
}
