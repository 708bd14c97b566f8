package bench

import (
	"context"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

// TestRunCreates runs the API create benchmark small: every create must
// answer 201 and every watch exist.
func TestRunCreates(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	res, err := RunCreates(context.Background(), pool, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Latency.N != 64 || res.Latency.P50 <= 0 {
		t.Errorf("result %+v", res)
	}
}
