package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/service"
)

// feedPrefix starts the URI of an owner's notification feed.
const feedPrefix = "lookout://notifications/"

// feedURI is the URI of owner's notification feed.
func feedURI(owner string) string { return feedPrefix + url.PathEscape(owner) }

// feedViewer returns whose view of the notifications the feed at uri is:
// its owner's, as a user (an admin's own feed too: the notifications of
// the admin's watches; recent_notifications shows an admin everything).
// A user may read and subscribe to its own feed only; an admin to any.
// Another owner's feed does not exist for a user.
func feedViewer(p control.Principal, uri string) (control.Principal, error) {
	rest, ok := strings.CutPrefix(uri, feedPrefix)
	owner, err := url.PathUnescape(rest)
	if !ok || err != nil || owner == "" || strings.Contains(rest, "/") {
		return control.Principal{}, mcpsdk.ResourceNotFoundError(uri)
	}
	if owner != p.Owner && !p.Admin {
		return control.Principal{}, mcpsdk.ResourceNotFoundError(uri)
	}
	return control.Principal{Owner: owner, Via: p.Via, TokenID: p.TokenID, RequestID: p.RequestID}, nil
}

func (s *Server) addResources() {
	s.srv.AddResourceTemplate(&mcpsdk.ResourceTemplate{
		Name:        "notifications",
		Title:       "Your notifications",
		URITemplate: feedPrefix + "{owner}",
		MIMEType:    "application/json",
		Description: "The newest notifications of the owner's watches (up to 50, newest first, as recent_notifications returns them). " +
			"Subscribe to it to be told (notifications/resources/updated) when a new one is created, then call recent_notifications " +
			"with after_id set to the largest id you have seen. Your owner is the feed field of recent_notifications' answer; " +
			"a user token may read its own feed only.",
	}, s.readFeed)
}

func (s *Server) readFeed(ctx context.Context, req *mcpsdk.ReadResourceRequest) (*mcpsdk.ReadResourceResult, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return nil, errors.New("unauthenticated")
	}
	view, err := feedViewer(p, req.Params.URI)
	if err != nil {
		return nil, err
	}
	page, err := s.svc.ListNotifications(ctx, view, control.NotificationQuery{})
	if err != nil {
		s.logger.Error("read feed", "uri", req.Params.URI, "request_id", p.RequestID, "error", err)
		return nil, fmt.Errorf("read %s failed; it was logged with request id %s", req.Params.URI, p.RequestID)
	}
	b, err := json.Marshal(page)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.Params.URI, err)
	}
	return &mcpsdk.ReadResourceResult{Contents: []*mcpsdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// feedBackoff spaces the restarts of a failed feed.
var feedBackoff = service.Backoff{Min: time.Second, Max: time.Minute}

func sleep(ctx context.Context, failures int) bool {
	return service.Sleep(ctx, feedBackoff.Delay(failures))
}
