package taskrunner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/tasks"
)

// A result over 64 KiB says so, instead of "the last line is not a JSON
// object" (its beginning was dropped) or "without a JSON object" (the
// body was cut); a stderr over 4 KiB is marked as truncated.
func TestResultsOver64KiBSaySo(t *testing.T) {
	t.Parallel()
	in := input{run: &tasks.Run{ID: 1, Source: "s", Task: "t", RecordID: "r"}, json: []byte(`{}`), deadline: time.Now().Add(time.Minute)}
	big := `{"x":"` + strings.Repeat("x", 70<<10) + `"}`

	c, err := newCommand([]string{"sh", "-c", `printf '%s\n' "$0"; head -c 6000 /dev/zero | tr '\000' e >&2`, big})
	if err != nil {
		t.Fatal(err)
	}
	out := c.run(context.Background(), in)
	if !strings.Contains(out.err, "is over 64 KiB, the most lookout keeps") || out.retry || out.result != nil {
		t.Errorf("command printing %d bytes: err %q, retry %v, result %d bytes; want a failure saying the result is over 64 KiB", len(big), out.err, out.retry, len(out.result))
	}
	if !strings.HasPrefix(out.stderr, "[truncated: the first 1904 bytes of stderr are not kept; the last 4096 follow]\n") {
		t.Errorf("stderr tail of 6000 bytes: %.120q", out.stderr)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(big))
	}))
	t.Cleanup(srv.Close)
	wh, err := newWebhook(&config.TaskWebhook{URL: srv.URL, Secret: "s3cret"}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	out = wh.run(context.Background(), in)
	if !strings.Contains(out.err, "with a body over 64 KiB") || out.retry || out.result != nil {
		t.Errorf("webhook answering %d bytes: err %q, retry %v; want a failure saying the body is over 64 KiB", len(big), out.err, out.retry)
	}
}
