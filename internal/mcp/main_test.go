package mcp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Feeds and their session watchers end with the server (Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
