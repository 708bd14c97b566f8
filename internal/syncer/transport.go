package syncer

import (
	"net/http"

	"golang.org/x/time/rate"
)

// limitedTransport waits on a source's token bucket before each request,
// so a connector cannot exceed the source's rate_limit however it pages.
type limitedTransport struct {
	base    http.RoundTripper
	limiter *rate.Limiter
}

func newLimitedTransport(base http.RoundTripper, perSecond float64, burst int) *limitedTransport {
	return &limitedTransport{base: base, limiter: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		return nil, err
	}
	return t.base.RoundTrip(req)
}
