package syncer

import (
	"fmt"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

// Failure backoff bounds.
const (
	backoffMin = 30 * time.Second
	backoffMax = time.Hour
)

// nextRun decides when the source runs again and why; the reason is stored
// in sources.interval_reason.
func (s *Syncer) nextRun(sc *config.Source, now time.Time, out outcome, failures int) (time.Time, string) {
	switch out.status {
	case "deferred":
		return out.retryAt, "upstream asked to wait until " + out.retryAt.UTC().Format(time.RFC3339)
	case "failed":
		n := failures + 1
		d := backoffMin << min(n-1, 20)
		if d > backoffMax || d <= 0 {
			d = backoffMax
		}
		d = d/2 + jitter(d/2)
		return now.Add(d), fmt.Sprintf("backoff after %d consecutive failure(s)", n)
	}
	every := sc.Every
	reason := "every " + every.String()
	if out.result.MinInterval > every {
		every = out.result.MinInterval
		reason = "upstream asked for at least " + every.String()
	}
	return now.Add(every + jitter(*sc.Jitter)), reason
}
