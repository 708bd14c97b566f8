package taskrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/signature"
)

// webhook posts the task to an agent, signed the Standard Webhooks way
// (internal/signature, as the webhook sink signs): webhook-id is the
// idempotency key, the same on every attempt. A 2xx with a JSON object
// completes the task; 202 means the agent works on it and reports through
// POST /v1/task-runs/{id}/result with the payload's report token; 408, 429
// and 5xx, a timeout or a network error are retried; other answers fail
// the task.
type webhook struct {
	url     string
	key     []byte
	headers map[string]string
	client  *http.Client
	now     func() time.Time
}

func newWebhook(w *config.TaskWebhook, client *http.Client) (*webhook, error) {
	key, err := signature.Key(w.Secret)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	return &webhook{url: w.URL, key: key, headers: w.Headers, client: client, now: time.Now}, nil
}

func (*webhook) kind() string { return "webhook" }

func (w *webhook) run(ctx context.Context, in input) output {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(in.json))
	if err != nil {
		return output{err: fmt.Sprintf("webhook request: %v", err)}
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lookout-tasks/1")
	ts := w.now()
	req.Header.Set(signature.HeaderID, in.run.IdempotencyKey)
	req.Header.Set(signature.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(signature.HeaderSignature, signature.SignStandard(w.key, in.run.IdempotencyKey, ts, in.json))
	req.Header.Set("X-Lookout-Task-Run-Id", strconv.FormatInt(in.run.ID, 10))
	req.Header.Set("X-Lookout-Attempt", strconv.Itoa(in.run.Attempt))
	resp, err := w.client.Do(req)
	if err != nil {
		// A *url.Error quotes the URL, which may be a credential.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var ne net.Error
		if ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
			return output{err: fmt.Sprintf("the webhook did not answer within the task's time (until %s)",
				in.deadline.UTC().Format(time.RFC3339)), retry: true}
		}
		return output{err: fmt.Sprintf("webhook: %v", err), retry: true}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, stdoutMax+1))
	over := len(body) > stdoutMax
	if over {
		body = body[:stdoutMax]
	}
	code := resp.StatusCode
	out := output{exitCode: &code}
	text := strings.TrimSpace(string(body))
	switch {
	case code == http.StatusAccepted:
		out.pending = true
	case code >= 200 && code < 300 && over:
		out.err = fmt.Sprintf("the webhook answered %d with a body over %d KiB, the most lookout keeps as a result; not retried, since the agent may have done its work: answer a smaller object (a link to the rest)",
			code, stdoutMax>>10)
		return out
	case code >= 200 && code < 300:
		if !json.Valid(body) || !strings.HasPrefix(text, "{") {
			out.err = fmt.Sprintf("the webhook answered %d without a JSON object (%q); not retried, since the agent may have done its work",
				code, clip(text, 200))
			return out
		}
		out.result = json.RawMessage(text)
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		out.err = fmt.Sprintf("the webhook answered %d: %s", code, clip(text, 300))
		out.retry = true
	default:
		out.err = fmt.Sprintf("the webhook answered %d (not retried): %s", code, clip(text, 300))
	}
	return out
}
