package all_test

import (
	"slices"
	"testing"

	"github.com/lookout-dev/lookout/internal/notify"
	_ "github.com/lookout-dev/lookout/internal/notify/all"
)

// Every sink type lookout ships is registered by importing all.
func TestEverySinkTypeIsRegistered(t *testing.T) {
	want := []string{"command", "email", "log", "slack", "webhook"}
	if got := notify.Kinds(); !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
}
