package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/lookout-dev/lookout/internal/egress"
)

// SlackOptions configure a Slack sink.
type SlackOptions struct {
	// URL is the incoming-webhook URL (https://hooks.slack.com/services/...). Required.
	URL string
	// Headers are sent with every request.
	Headers map[string]string
	// Concurrency sizes the connection pool.
	Concurrency int
	// Egress limits the addresses the sink connects to. Defaults to the
	// zero Policy (link-local and metadata addresses refused).
	Egress egress.Policy
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
		c = newHTTPClient(o.Concurrency, o.Egress)
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

// Slack's documented limits, in characters
// (https://api.slack.com/reference/block-kit/blocks): a longer section or
// context text makes Slack answer 400 invalid_blocks, and a longer
// top-level text is truncated by Slack.
const (
	SlackSectionTextMax = 3000
	SlackContextTextMax = 3000
	SlackTextMax        = 40000
)

// SlackMessageFor builds the message for n. Every text is escaped for
// mrkdwn and cut by characters to Slack's limits, ending in "…" when cut.
func SlackMessageFor(n *Notification) SlackMessage {
	title := "*" + slackCut(n.Title, SlackSectionTextMax-2) + "*"
	if u := n.Payload.Record.URL; u != "" && n.Kind != KindDigest {
		// The link only when the whole URL fits with the title: a cut URL
		// is a broken link.
		eu := slackEscape(u)
		if room := SlackSectionTextMax - 4 - utf8.RuneCountInString(eu) - 1; room > 0 {
			title = "*<" + eu + "|" + slackCut(n.Title, room) + ">*"
		}
	}
	blocks := []SlackBlock{{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: title}}}
	if b := strings.TrimSpace(n.Body); b != "" {
		blocks = append(blocks, SlackBlock{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: slackCut(b, SlackSectionTextMax)}})
	}
	ctx := fmt.Sprintf("%s urgency *%s*", urgencyEmoji[n.Urgency], slackEscape(n.Urgency))
	if n.Reason != "" {
		ctx += " · " + slackEscape(n.Reason)
	}
	ctx += fmt.Sprintf(" · %s/%s · `%s`", slackEscape(n.Source), slackEscape(n.Watch), slackEscape(n.DedupeKey))
	ctx = strings.TrimSpace(ctx)
	if utf8.RuneCountInString(ctx) > SlackContextTextMax {
		ctx = string([]rune(ctx)[:SlackContextTextMax-1]) + "…"
	}
	blocks = append(blocks, SlackBlock{Type: "context", Elements: []SlackText{{Type: "mrkdwn", Text: ctx}}})
	// The fallback text is mrkdwn too: a title like "<!channel>" would
	// notify the whole channel unescaped.
	text := slackCut(fmt.Sprintf("[%s] %s", n.Urgency, n.Title), SlackTextMax)
	return SlackMessage{Text: text, Blocks: blocks}
}

// slackEscape escapes the three characters mrkdwn reserves, as Slack
// documents: & as &amp;, < as &lt;, > as &gt;.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackCut escapes s and returns at most limit characters (runes) of the
// result, ending in "…" when s had to be cut; it never cuts an escape
// sequence in two.
func slackCut(s string, limit int) string {
	width := func(r rune) int {
		switch r {
		case '&':
			return len("&amp;")
		case '<', '>':
			return len("&lt;")
		}
		return 1
	}
	total := 0
	for _, r := range s {
		total += width(r)
	}
	if total <= limit {
		return slackEscape(s)
	}
	used, end := 0, 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		if used+width(r) > limit-1 { // room for "…"
			break
		}
		used += width(r)
		end += size
	}
	return slackEscape(s[:end]) + "…"
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
	return post(ctx, s.client, n, s.opts.URL, h, body, "slack")
}
