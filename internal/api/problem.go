package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/validation"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/idempotency"
)

// ProblemTypeBase starts the type URI of every problem; docs/api.md#errors
// explains each one.
const ProblemTypeBase = "https://lookout.dev/problems/"

// Problem types (the part after ProblemTypeBase).
const (
	ProblemValidation   = "validation"
	ProblemMalformed    = "malformed-request"
	ProblemUnauthorized = "unauthorized"
	ProblemForbidden    = "forbidden"
	ProblemNotFound     = "not-found"
	ProblemConflict     = "conflict"
	ProblemIdempotency  = "idempotency-key-reused"
	ProblemLimit        = "limit-exceeded"
	ProblemTooLarge     = "body-too-large"
	ProblemInternal     = "internal"
	// ProblemUnavailable: another deployment did not answer in time (a
	// dry run with the model waits for an evaluator).
	ProblemUnavailable = "unavailable"
	ProblemOther       = "http"
)

// Problem is an RFC 9457 problem details object, served as
// application/problem+json. Errors lists each thing wrong with the
// request, located by a JSON pointer into the body, a query or path
// parameter, or a header.
type Problem struct {
	Type     string         `json:"type" doc:"A URI naming the kind of problem; docs/api.md#errors describes each."`
	Title    string         `json:"title" doc:"A short summary of the kind of problem."`
	Status   int            `json:"status" doc:"The HTTP status code."`
	Detail   string         `json:"detail" doc:"What went wrong this time and how to fix it."`
	Instance string         `json:"instance,omitempty" doc:"The request id (also in the X-Request-Id header)."`
	Errors   []ProblemError `json:"errors,omitempty" doc:"Each thing wrong with the request."`
}

// ProblemError is one thing wrong with a request.
type ProblemError struct {
	Detail    string `json:"detail" doc:"What is wrong and what a correct value looks like."`
	Pointer   string `json:"pointer,omitempty" doc:"JSON pointer (RFC 6901) to the field of the request body, e.g. /watch/when; present on every error about the body, \"\" for the whole body (an array sent where an object belongs)."`
	Parameter string `json:"parameter,omitempty" doc:"The query or path parameter, e.g. cursor."`
	Header    string `json:"header,omitempty" doc:"The request header, e.g. Idempotency-Key."`
	Value     any    `json:"value,omitempty" doc:"The value sent."`
}

// MarshalJSON writes pointer on every error that names no parameter or
// header: such an error is about the body, and "" (RFC 6901: the whole
// body, as when a JSON array is sent where an object belongs) is a
// pointer too, which omitempty would drop.
func (e ProblemError) MarshalJSON() ([]byte, error) {
	out := struct {
		Detail    string  `json:"detail"`
		Pointer   *string `json:"pointer,omitempty"`
		Parameter string  `json:"parameter,omitempty"`
		Header    string  `json:"header,omitempty"`
		Value     any     `json:"value,omitempty"`
	}{Detail: e.Detail, Parameter: e.Parameter, Header: e.Header, Value: e.Value}
	if e.Pointer != "" || (e.Parameter == "" && e.Header == "") {
		out.Pointer = &e.Pointer
	}
	return json.Marshal(out)
}

// Error returns the detail.
func (p *Problem) Error() string { return p.Detail }

// GetStatus returns the HTTP status.
func (p *Problem) GetStatus() int { return p.Status }

// ContentType serves problems as application/problem+json.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	return ct
}

var (
	_ huma.StatusError       = (*Problem)(nil)
	_ huma.ContentTypeFilter = (*Problem)(nil)
)

func newProblem(status int, typ, detail string) *Problem {
	return &Problem{Type: ProblemTypeBase + typ, Title: http.StatusText(status), Status: status, Detail: detail}
}

// registries maps each registered operation to its API's schema registry,
// so that error messages can name the fields an object allows.
var registries sync.Map // *huma.Operation -> huma.Registry

func init() {
	huma.NewErrorWithContext = func(ctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
		var reg huma.Registry
		var op *huma.Operation
		if ctx != nil {
			op = ctx.Operation()
			if r, ok := registries.Load(op); ok {
				reg = r.(huma.Registry)
			}
		}
		p := hProblem(op, reg, status, msg, errs)
		if ctx != nil && p.Instance == "" {
			p.Instance, _ = ctx.Context().Value(requestIDKey).(string)
		}
		return p
	}
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		return hProblem(nil, nil, status, msg, errs)
	}
}

// hProblem turns huma's errors (request validation, body parsing, limits)
// into a Problem whose messages a language model can act on.
func hProblem(op *huma.Operation, reg huma.Registry, status int, msg string, errs []error) *Problem {
	for _, e := range errs {
		if p, ok := e.(*Problem); ok {
			return p
		}
	}
	typ := ProblemOther
	switch {
	case status == http.StatusUnprocessableEntity:
		typ = ProblemValidation
	case status == http.StatusBadRequest:
		typ = ProblemMalformed
	case status == http.StatusRequestEntityTooLarge:
		typ = ProblemTooLarge
	case status == http.StatusNotFound:
		typ = ProblemNotFound
	case status >= 500:
		typ = ProblemInternal
	}
	p := newProblem(status, typ, msg)
	for _, e := range errs {
		if e == nil {
			continue
		}
		var d *huma.ErrorDetail
		if !errors.As(e, &d) {
			if status >= 500 {
				continue // never echo internal errors
			}
			p.Errors = append(p.Errors, ProblemError{Detail: e.Error()})
			continue
		}
		p.Errors = append(p.Errors, detailFor(op, reg, d))
	}
	switch typ {
	case ProblemValidation:
		p.Detail = fmt.Sprintf("the request has %d problem(s); each entry of errors names the field (pointer, parameter or header) and what to change", len(p.Errors))
	case ProblemMalformed:
		if strings.Contains(msg, "unmarshal") || strings.Contains(msg, "JSON") || len(p.Errors) > 0 {
			p.Detail = "the request body is not valid JSON: " + joinDetails(p.Errors, msg) + "; send one JSON object with Content-Type: application/json"
			p.Errors = nil
		}
	case ProblemTooLarge:
		p.Detail = fmt.Sprintf("the request body is larger than %d bytes (1 MiB); send less (a watch definition is a few kilobytes)", maxBody)
	}
	return p
}

func joinDetails(es []ProblemError, fallback string) string {
	if len(es) == 0 {
		return fallback
	}
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Detail
	}
	return strings.Join(parts, "; ")
}

var indexRE = regexp.MustCompile(`\[(\d+)\]`)

// detailFor locates a huma error detail and rewrites its message.
func detailFor(op *huma.Operation, reg huma.Registry, d *huma.ErrorDetail) ProblemError {
	pe := ProblemError{Detail: d.Message, Value: d.Value}
	where, rest, _ := strings.Cut(d.Location, ".")
	var segs []string
	switch where {
	case "body":
		if d.Location == "body" {
			rest = ""
		}
		rest = indexRE.ReplaceAllString(rest, ".$1")
		if rest != "" {
			segs = strings.Split(rest, ".")
		}
		pe.Pointer = pointer(segs)
	case "query", "path":
		pe.Parameter = rest
	case "header":
		pe.Header = rest
	default:
		pe.Pointer = ""
	}
	msg := d.Message
	switch {
	case msg == validation.MsgUnexpectedProperty && where == "body" && len(segs) > 0:
		name := segs[len(segs)-1]
		allowed := propertiesAt(op, reg, segs[:len(segs)-1])
		pe.Detail = fmt.Sprintf("unknown field %q", name)
		if len(allowed) > 0 {
			pe.Detail += "; the fields allowed here are " + strings.Join(allowed, ", ")
		}
		pe.Detail += ": remove it or correct its name"
		pe.Value = nil
	case strings.HasPrefix(msg, "expected required property "):
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "expected required property "), " to be present")
		if where == "body" {
			pe.Pointer = pointer(append(slices.Clone(segs), name))
			pe.Detail = fmt.Sprintf("field %q is required here and missing", name)
		} else {
			pe.Detail = fmt.Sprintf("%s %q is required", where, name)
		}
	case strings.HasPrefix(msg, "expected ") && isTypeMessage(msg) && where == "body" && len(segs) == 0:
		pe.Detail = fmt.Sprintf("the request body must be a JSON %s, got %s: send one JSON %s", strings.TrimPrefix(msg, "expected "), jsonTypeName(d.Value), strings.TrimPrefix(msg, "expected "))
		pe.Value = nil // the whole body: not echoed
	case strings.HasPrefix(msg, "expected ") && isTypeMessage(msg):
		pe.Detail = fmt.Sprintf("wrong type: %s, got %s", strings.TrimPrefix(msg, "expected "), jsonTypeName(d.Value))
	}
	return pe
}

func isTypeMessage(msg string) bool {
	switch msg {
	case validation.MsgExpectedBoolean, validation.MsgExpectedNumber, validation.MsgExpectedInteger,
		validation.MsgExpectedString, validation.MsgExpectedArray, validation.MsgExpectedObject:
		return true
	}
	return false
}

func jsonTypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return "a boolean"
	case float64, int, int64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// pointer encodes segments as an RFC 6901 JSON pointer ("" is the whole body).
func pointer(segs []string) string {
	if len(segs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// propertiesAt returns the property names the request body schema allows
// at segs.
func propertiesAt(op *huma.Operation, reg huma.Registry, segs []string) []string {
	if op == nil || reg == nil || op.RequestBody == nil {
		return nil
	}
	mt := op.RequestBody.Content["application/json"]
	if mt == nil || mt.Schema == nil {
		return nil
	}
	s := resolve(reg, mt.Schema)
	for _, seg := range segs {
		if s == nil {
			return nil
		}
		if _, err := strconv.Atoi(seg); err == nil && s.Items != nil {
			s = resolve(reg, s.Items)
			continue
		}
		s = resolve(reg, s.Properties[seg])
	}
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		if n != "$schema" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

func resolve(reg huma.Registry, s *huma.Schema) *huma.Schema {
	for i := 0; s != nil && s.Ref != "" && i < 10; i++ {
		s = reg.SchemaFromRef(s.Ref)
	}
	return s
}

// problemFrom maps an error of the control layer to a Problem; other
// errors are internal (logged by the caller, not shown).
func problemFrom(err error) *Problem {
	var (
		nf  *control.NotFoundError
		inv *control.InvalidError
		cf  *control.ConflictError
		lim *control.LimitError
		fb  *control.ForbiddenError
		ua  *control.UnauthorizedError
		un  *control.UnavailableError
		mm  *idempotency.MismatchError
		p   *Problem
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &nf):
		return newProblem(http.StatusNotFound, ProblemNotFound, nf.Error())
	case errors.As(err, &inv):
		out := newProblem(http.StatusUnprocessableEntity, ProblemValidation,
			fmt.Sprintf("the request has %d problem(s); each entry of errors names the field (pointer, parameter or header) and what to change; nothing was changed", len(inv.Errors)))
		for _, f := range inv.Errors {
			out.Errors = append(out.Errors, ProblemError{Detail: f.Detail, Pointer: f.Pointer, Parameter: f.Parameter, Header: f.Header, Value: f.Value})
		}
		return out
	case errors.As(err, &cf):
		out := newProblem(http.StatusConflict, ProblemConflict, cf.Detail)
		if cf.Pointer != "" {
			out.Errors = []ProblemError{{Pointer: cf.Pointer, Detail: cf.Detail}}
		}
		return out
	case errors.As(err, &lim):
		out := newProblem(http.StatusForbidden, ProblemLimit, lim.Error())
		if lim.Pointer != "" {
			out.Errors = []ProblemError{{Pointer: lim.Pointer, Detail: lim.Error()}}
		}
		return out
	case errors.As(err, &fb):
		return newProblem(http.StatusForbidden, ProblemForbidden, fb.Detail)
	case errors.As(err, &un):
		return newProblem(http.StatusServiceUnavailable, ProblemUnavailable, un.Detail)
	case errors.As(err, &ua):
		out := newProblem(http.StatusUnauthorized, ProblemUnauthorized, ua.Detail)
		out.Errors = []ProblemError{{Header: "Authorization", Detail: ua.Detail}}
		return out
	case errors.As(err, &mm):
		out := newProblem(http.StatusUnprocessableEntity, ProblemIdempotency, mm.Error())
		out.Errors = []ProblemError{{Header: "Idempotency-Key", Detail: mm.Error(), Value: mm.Key}}
		return out
	}
	return nil
}
