package control

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// Cursors are opaque to clients: base64url of "v1:<id>". They only carry
// a position; every page is scoped to its caller anew.

func encodeCursor(id int64) string {
	if id <= 0 {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(id, 10)))
}

// decodeCursor reads a cursor given as query parameter param.
func decodeCursor(param, c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if v, ok := strings.CutPrefix(string(b), "v1:"); ok {
			if id, err := strconv.ParseInt(v, 10, 64); err == nil && id > 0 {
				return id, nil
			}
		}
	}
	return 0, InvalidParameter(param, c, "not a cursor of this API: pass the next_cursor of the previous page unchanged, or leave %s out to start from the newest", param)
}

// pageBounds checks a listing's cursor and page size: the id the page
// starts before (0: the newest) and the number of rows (pageLimit).
func pageBounds(cursor string, n int) (before int64, limit int, err error) {
	if before, err = decodeCursor("cursor", cursor); err != nil {
		return 0, 0, err
	}
	if limit, err = pageLimit(n); err != nil {
		return 0, 0, err
	}
	return before, limit, nil
}
