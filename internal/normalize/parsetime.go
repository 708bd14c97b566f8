package normalize

import "time"

// ParseTime reads a time the way mapped created_at/updated_at fields are
// read: RFC 3339 and a few common layouts as strings, Unix seconds as
// numbers, nil or "" as no time. Connectors use it for incremental cursors.
func ParseTime(v any) (*time.Time, error) { return timeOf(v) }
