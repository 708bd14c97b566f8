package health

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A response streamed after the request's body was read is not cut by
// the body's read deadline: the notification stream and streamed MCP
// answers last as long as they need (no write timeout, and the read
// deadline lifted at the body's end).
func TestStreamAfterABodyOutlivesTheBodyDeadline(t *testing.T) {
	t.Parallel()
	const grace = 200 * time.Millisecond
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler))
	s.SetLimits(Limits{BodyGrace: grace, BodyMinRate: 100})
	s.Mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tick := time.NewTicker(grace / 2)
		defer tick.Stop()
		for i := range 10 { // five times the grace
			if err := r.Context().Err(); err != nil {
				fmt.Fprintf(w, "cancelled: %v\n", err)
				return
			}
			fmt.Fprintf(w, "chunk %d\n", i)
			_ = http.NewResponseController(w).Flush()
			<-tick.C
		}
	}), nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	resp, err := http.Post("http://"+s.Addr()+"/stream", "application/json", strings.NewReader(`{"after_id": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(b), "chunk 9\n") {
		t.Errorf("stream: %d %v\n%s", resp.StatusCode, err, b)
	}
}
