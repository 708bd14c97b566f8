package control

import (
	"context"

	"github.com/lookout-dev/lookout/internal/audit"
)

// AuditQuery selects a page of the audit log.
type AuditQuery struct {
	Cursor string
	// Limit bounds the page: 1 to 200. Defaults to 50.
	Limit int
	// Kind (watch, source, token) and Target filter; "" matches all.
	Kind, Target string
}

// AuditPage is a page of the audit log, newest first.
type AuditPage struct {
	Items      []audit.Entry `json:"items"`
	NextCursor string        `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next (older) page; absent on the last page."`
}

// ListAudit returns the audit entries of p's objects (every entry for an
// admin), newest first.
func (s *Service) ListAudit(ctx context.Context, p Principal, q AuditQuery) (*AuditPage, error) {
	before, limit, err := pageBounds(q.Cursor, q.Limit)
	if err != nil {
		return nil, err
	}
	owner := p.listOwner()
	entries, err := audit.List(ctx, s.pool, audit.Filter{Owner: owner, Kind: q.Kind, Target: q.Target, Before: before, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	page := &AuditPage{Items: []audit.Entry{}}
	for i, e := range entries {
		if i == limit {
			page.NextCursor = encodeCursor(entries[i-1].ID)
			break
		}
		page.Items = append(page.Items, e)
	}
	return page, nil
}
