package connectors

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
)

// Checks shared by connector decoders. Each returns nil or errors located
// at key in src, joined.

// CheckURL reports a missing URL, or one that is not an absolute http(s) URL.
func CheckURL(src *config.Source, key, raw string) error {
	if raw == "" {
		return src.Errorf(key, "is required")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return src.Errorf(key, "is not a valid URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return src.Errorf(key, "must start with http:// or https://, not %q", raw)
	case u.Host == "":
		return src.Errorf(key, "has no host: %q", raw)
	}
	return nil
}

// CheckHeaders reports header names that are not valid and values with a
// line break.
func CheckHeaders(src *config.Source, key string, h map[string]string) error {
	var errs []error
	for k, v := range h {
		if k == "" || strings.ContainsAny(k, " :\r\n\t") {
			errs = append(errs, src.Errorf(key+"."+k, "is not a valid header name"))
		}
		if strings.ContainsAny(v, "\r\n") {
			errs = append(errs, src.Errorf(key+"."+k, "value contains a line break"))
		}
	}
	return errors.Join(errs...)
}

// Header turns configured headers into an http.Header; nil when there
// are none.
func Header(m map[string]string) http.Header {
	if len(m) == 0 {
		return nil
	}
	h := make(http.Header, len(m))
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}
