package github

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

var _ connectors.EventMapper = (*Connector)(nil)

// MapEvent maps a GitHub webhook delivery to the item Fetch emits for
// the issue or pull request it is about, so that the record an event
// writes is the record a poll writes (one change for the same content):
//
//   - issues: the payload's issue is the REST API's issue object: it is
//     used as is, without a request. deleted and transferred delete the
//     record.
//   - pull_request: the payload's pull_request is the pulls API's object,
//     not the issue the poll lists (labels, comments, the pull_request
//     key differ): the issue is fetched (GET /repos/{owner}/{repo}/issues/N).
//   - issue_comment: the payload's issue does not follow the comment
//     count reliably (the comment that triggered the event may or may not
//     be counted): the issue is fetched.
//
// A fetch goes through the source's HTTP client: its rate limit and the
// host's budget apply (FetchKey says which events fetch, so that the
// syncer writes the others first and fetches an issue once per batch).
// An event of another repository, or of a type the connector does not
// map, is ignored.
func (c *Connector) MapEvent(ctx context.Context, ev connectors.Event) (connectors.EventResult, error) {
	var res connectors.EventResult
	obj, num, err := c.eventObject(ev)
	if err != nil {
		return res, err
	}
	loc := fmt.Sprintf("%s event %s", ev.Type, ev.DeliveryID)
	if ev.Type == "issues" {
		v, raw, err := Shape(obj)
		if err != nil {
			return res, &connectors.ItemError{Loc: loc, Err: err}
		}
		res.Items = []connectors.Item{{Value: v, Raw: raw, Loc: loc}}
		res.Deleted = ev.Action == "deleted" || ev.Action == "transferred"
		return res, nil
	}
	data, err := c.do(ctx, http.MethodGet, "/issues/"+strconv.FormatInt(num, 10), nil)
	res.Fetched = 1
	if err != nil {
		return res, fmt.Errorf("fetch the issue of %s: %w", loc, err)
	}
	decoded, err := normalize.Decode(data)
	if err != nil {
		return res, fmt.Errorf("decode issue %d: %w", num, err)
	}
	v, raw, err := Shape(decoded)
	if err != nil {
		return res, &connectors.ItemError{Loc: loc, Err: err}
	}
	res.Items = []connectors.Item{{Value: v, Raw: raw, Loc: loc + " (issue " + strconv.FormatInt(num, 10) + " fetched)"}}
	return res, nil
}

// FetchKey names the issue MapEvent fetches for a pull_request or
// issue_comment event of this source's repository ("issue 12"; a pull
// request is an issue of the same number), and is "" for an issues event
// (its payload is the item) and for an event MapEvent ignores or refuses
// without a request.
func (c *Connector) FetchKey(ev connectors.Event) string {
	if ev.Type == "issues" {
		return ""
	}
	_, num, err := c.eventObject(ev)
	if err != nil {
		return ""
	}
	return "issue " + strconv.FormatInt(num, 10)
}

// eventObject checks that ev is an event of a mapped type about this
// source's repository and returns the object it is about (the payload's
// issue, or pull_request) and its number.
func (c *Connector) eventObject(ev connectors.Event) (map[string]any, int64, error) {
	if !slices.Contains(config.GitHubWebhookEvents, ev.Type) {
		return nil, 0, connectors.Ignore("event %s is not one the github connector maps (%s)", ev.Type, strings.Join(config.GitHubWebhookEvents, ", "))
	}
	if repo, ok := ev.Payload["repository"].(map[string]any); ok {
		if name, _ := repo["full_name"].(string); name != "" && !strings.EqualFold(name, c.repo) {
			return nil, 0, connectors.Ignore("event of repository %s, not this source's %s", name, c.repo)
		}
	}
	key := "issue"
	if ev.Type == "pull_request" {
		key = "pull_request"
	}
	obj, ok := ev.Payload[key].(map[string]any)
	if !ok {
		return nil, 0, fmt.Errorf("%s event %s has no %s object", ev.Type, ev.DeliveryID, key)
	}
	num, ok := obj["number"].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("%s event %s: the %s has no number", ev.Type, ev.DeliveryID, key)
	}
	return obj, num, nil
}
