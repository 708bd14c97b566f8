package syncer

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// A run's log line shows a small cursor whole and a large one (a web
// source's whole page) by its size and hash, never its content.
func TestLogCursorBoundsLargeCursors(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&out, nil))
	small := json.RawMessage(`{"etag":"\"abc\""}`)
	large := json.RawMessage(`{"text":"` + strings.Repeat("page line ", 200) + `"}`)
	logger.Info("run finished", "cursor_before", logCursor(small), "cursor_after", logCursor(large))

	var line struct {
		Before json.RawMessage `json:"cursor_before"`
		After  struct {
			Bytes  int    `json:"bytes"`
			SHA256 string `json:"sha256"`
		} `json:"cursor_after"`
	}
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("%s: %v", out.String(), err)
	}
	if string(line.Before) != string(small) {
		t.Errorf("cursor_before %s, want the small cursor whole (%s)", line.Before, small)
	}
	if line.After.Bytes != len(large) || len(line.After.SHA256) != 16 {
		t.Errorf("cursor_after %+v, want %d bytes and a 16-digit hash", line.After, len(large))
	}
	if strings.Contains(out.String(), "page line") {
		t.Errorf("the large cursor's content was logged: %s", out.String())
	}
}
