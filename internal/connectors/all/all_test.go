package all_test

import (
	"slices"
	"testing"

	"github.com/lookout-dev/lookout/internal/connectors"
	_ "github.com/lookout-dev/lookout/internal/connectors/all"
)

// Every connector lookout ships is registered by importing all. (The
// examples of docs/connectors.md are built by internal/e2e.)
func TestEveryConnectorIsRegistered(t *testing.T) {
	want := []string{"file", "github", "http", "imap", "notion", "postgres", "rss", "web"}
	if got := connectors.Names(); !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
}
