package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// SlackOptions configure a Slack sink.
type SlackOptions struct {
	// URL is the incoming-webhook URL (https://hooks.slack.com/services/...). Required.
	URL string
	// Headers are sent with every request.
	Headers map[string]string
	// Concurrency sizes the connection pool.
	Concurrency int
	// Client replaces the HTTP client (tests).
	Client *http.Client
}

// SlackSink posts a message to a Slack incoming webhook: the title as a
// link to the record, the body, and a context line with urgency, reason
// and the watch. Slack cannot deduplicate: a repeat after a crash shows
// twice, with the same dedupe key in its context line.
type SlackSink struct {
	opts   SlackOptions
	client *http.Client
}

var _ Sink = (*SlackSink)(nil)

// NewSlackSink returns a Slack sink.
func NewSlackSink(o SlackOptions) (*SlackSink, error) {
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return nil, errors.New("slack url must start with http:// or https://")
	}
	c := o.Client
	if c == nil {
		c = newHTTPClient(o.Concurrency)
	}
	return &SlackSink{opts: o, client: c}, nil
}

// SlackMessage is the JSON an incoming webhook receives.
type SlackMessage struct {
	// Text is the fallback shown in notifications and by clients without blocks.
	Text   string       `json:"text"`
	Blocks []SlackBlock `json:"blocks"`
}

// SlackBlock is one Block Kit block (section or context).
type SlackBlock struct {
	Type     string      `json:"type"`
	Text     *SlackText  `json:"text,omitempty"`
	Elements []SlackText `json:"elements,omitempty"`
}

// SlackText is a Block Kit text object.
type SlackText struct {
	Type string `json:"type"` // mrkdwn or plain_text
	Text string `json:"text"`
}

// urgencyEmoji marks the urgency in the context line.
var urgencyEmoji = map[string]string{"high": ":red_circle:", "medium": ":large_orange_circle:", "low": ":white_circle:"}

// SlackMessageFor builds the message for n.
func SlackMessageFor(n *Notification) SlackMessage {
	title := slackEscape(n.Title)
	if u := n.Payload.Record.URL; u != "" && n.Kind != KindDigest {
		title = "<" + slackEscape(u) + "|" + title + ">"
	}
	blocks := []SlackBlock{{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: snippet("*"+title+"*", 3000)}}}
	if b := strings.TrimSpace(n.Body); b != "" {
		blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: snippet(slackEscape(b), 3000)}})
	}
	ctx := fmt.Sprintf("%s urgency *%s*", urgencyEmoji[n.Urgency], slackEscape(n.Urgency))
	if n.Reason != "" {
		ctx += " · " + slackEscape(n.Reason)
	}
	ctx += fmt.Sprintf(" · %s/%s · `%s`", slackEscape(n.Source), slackEscape(n.Watch), slackEscape(n.DedupeKey))
	blocks = append(blocks, SlackBlock{Type: "context", Elements: []SlackText{{Type: "mrkdwn", Text: snippet(strings.TrimSpace(ctx), 3000)}}})
	return SlackMessage{Text: fmt.Sprintf("[%s] %s", n.Urgency, n.Title), Blocks: blocks}
}

// slackEscape escapes the three characters mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Deliver posts the message. Slack answers 200 "ok"; 4xx (invalid_payload,
// no_service, channel_is_archived) are permanent, 429 and 5xx retried.
func (s *SlackSink) Deliver(ctx context.Context, n *Notification) error {
	body, err := json.Marshal(SlackMessageFor(n))
	if err != nil {
		return &PermanentError{Err: fmt.Errorf("encode slack message: %w", err)}
	}
	h := http.Header{}
	for k, v := range s.opts.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "lookout-slack/1")
	return post(ctx, s.client, s.opts.URL, h, body, "slack")
}
