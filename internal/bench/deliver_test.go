package bench

import (
	"context"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestRunDeliveries runs the delivery benchmark small: its receiver
// rejects any request whose Standard Webhooks signature does not verify,
// so this fails when the sink and the receiver disagree on the scheme.
func TestRunDeliveries(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	took, err := RunDeliveries(context.Background(), pool, 50)
	if err != nil {
		t.Fatal(err)
	}
	if took <= 0 {
		t.Errorf("took %v", took)
	}
}
