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

// TestDeliveriesAgainstBare runs (5) small with its baseline: the bare
// loop's receiver verifies every signature too, and every run of each
// side must deliver all of its messages (DeliverTo and BarePosts check
// the receiver's counts), so a bare loop that signs differently from the
// webhook sink, or runs that collide on keys, fail here.
func TestDeliveriesAgainstBare(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	viaOutbox, bare, err := DeliveriesAgainstBare(context.Background(), pool, 40)
	if err != nil {
		t.Fatal(err)
	}
	if viaOutbox <= 0 || bare <= 0 {
		t.Errorf("outbox %v, bare %v", viaOutbox, bare)
	}
}
