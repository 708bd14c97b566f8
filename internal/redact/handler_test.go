package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const secret = "s3cr3t-token-value"

// Values of every kind a log call may carry, each built fresh: nil
// pointers, nil interfaces, typed nils in an any, LogValuers that panic or
// return nil pointers, errors and Stringers that panic, zero times, and
// values holding the secret (which must never be printed).
type (
	panicValuer     struct{}
	nilPtrValuer    struct{}
	groupValuer     struct{}
	ptrValuer       struct{ s string }
	panicError      struct{}
	ptrError        struct{ msg string }
	panicStringer   struct{}
	ptrStringer     struct{ s string }
	panicMarshaler  struct{}
	secretMarshaler struct{}
	recursiveValuer struct{}
)

func (panicValuer) LogValue() slog.Value  { panic("LogValue boom") }
func (nilPtrValuer) LogValue() slog.Value { return slog.AnyValue((*time.Time)(nil)) }
func (groupValuer) LogValue() slog.Value {
	return slog.GroupValue(slog.String("token", secret), slog.Any("at", (*time.Time)(nil)))
}
func (p *ptrValuer) LogValue() slog.Value           { return slog.StringValue(p.s) }
func (panicError) Error() string                    { panic("Error boom") }
func (e *ptrError) Error() string                   { return e.msg }
func (panicStringer) String() string                { panic("String boom") }
func (s *ptrStringer) String() string               { return s.s }
func (panicMarshaler) MarshalText() ([]byte, error) { panic("MarshalText boom") }
func (secretMarshaler) MarshalJSON() ([]byte, error) {
	return nil, errors.New("marshal refused")
}
func (recursiveValuer) LogValue() slog.Value { return slog.AnyValue(recursiveValuer{}) }

// values returns one generator per kind of value; depth bounds groups.
func values(rng *rand.Rand, depth int) []func() slog.Value {
	var nilErr error
	var nilStringer fmt.Stringer
	var nilAny any
	var nilValuer slog.LogValuer
	gen := []func() slog.Value{
		func() slog.Value { return slog.StringValue(secret) },
		func() slog.Value { return slog.StringValue("before " + secret + " after") },
		func() slog.Value { return slog.StringValue("") },
		func() slog.Value { return slog.IntValue(rng.Int()) },
		func() slog.Value { return slog.Int64Value(-1) },
		func() slog.Value { return slog.Uint64Value(^uint64(0)) },
		func() slog.Value { return slog.Float64Value(rng.Float64()) },
		func() slog.Value { return slog.BoolValue(true) },
		func() slog.Value { return slog.DurationValue(time.Duration(rng.Int64())) },
		func() slog.Value { return slog.TimeValue(time.Time{}) },
		func() slog.Value { return slog.TimeValue(time.Date(2026, 2, 28, 23, 59, 59, 0, time.UTC)) },
		func() slog.Value { return slog.AnyValue(time.Time{}) },
		func() slog.Value { return slog.AnyValue((*time.Time)(nil)) },
		func() slog.Value { t := time.Time{}; return slog.AnyValue(&t) },
		func() slog.Value { return slog.AnyValue(nil) },
		func() slog.Value { return slog.AnyValue(nilAny) },
		func() slog.Value { return slog.AnyValue(nilErr) },
		func() slog.Value { return slog.AnyValue(nilStringer) },
		func() slog.Value { return slog.AnyValue(nilValuer) },
		func() slog.Value { return slog.AnyValue((*int)(nil)) },
		func() slog.Value { return slog.AnyValue((*string)(nil)) },
		func() slog.Value { s := secret; return slog.AnyValue(&s) },
		func() slog.Value { return slog.AnyValue(any((*ptrError)(nil))) },
		func() slog.Value { return slog.AnyValue(error((*ptrError)(nil))) },
		func() slog.Value { return slog.AnyValue(&ptrError{msg: "dial: " + secret}) },
		func() slog.Value { return slog.AnyValue(fmt.Errorf("wrapped: %w", &ptrError{msg: secret})) },
		func() slog.Value { return slog.AnyValue(panicError{}) },
		func() slog.Value { return slog.AnyValue(fmt.Errorf("wrapped: %w", panicError{})) },
		func() slog.Value { return slog.AnyValue((*ptrStringer)(nil)) },
		func() slog.Value { return slog.AnyValue(&ptrStringer{s: "url?token=" + secret}) },
		func() slog.Value { return slog.AnyValue(panicStringer{}) },
		func() slog.Value { return slog.AnyValue(panicMarshaler{}) },
		func() slog.Value { return slog.AnyValue(secretMarshaler{}) },
		func() slog.Value { return slog.AnyValue(panicValuer{}) },
		func() slog.Value { return slog.AnyValue(nilPtrValuer{}) },
		func() slog.Value { return slog.AnyValue(groupValuer{}) },
		func() slog.Value { return slog.AnyValue((*ptrValuer)(nil)) },
		func() slog.Value { return slog.AnyValue(&ptrValuer{s: secret}) },
		func() slog.Value { return slog.AnyValue(recursiveValuer{}) },
		func() slog.Value { return slog.AnyValue([]byte(secret)) },
		func() slog.Value { return slog.AnyValue([]byte(nil)) },
		func() slog.Value { return slog.AnyValue([]string{"a", secret, ""}) },
		func() slog.Value { return slog.AnyValue([]string(nil)) },
		func() slog.Value { return slog.AnyValue(map[string]int{"a": 1}) },
		func() slog.Value { return slog.AnyValue(map[string]any(nil)) },
		func() slog.Value { return slog.AnyValue(struct{ A *int }{}) },
		func() slog.Value { return slog.AnyValue(make(chan int)) },
		func() slog.Value { return slog.AnyValue(func() {}) },
		func() slog.Value { return slog.AnyValue([]any{nil, (*time.Time)(nil), panicError{}}) },
		func() slog.Value { return slog.GroupValue() },
		// A group of empty attributes only (Go's JSON handler writes
		// invalid JSON for one).
		func() slog.Value { return slog.GroupValue(slog.Attr{Key: "", Value: slog.AnyValue(nil)}) },
		func() slog.Value { return slog.GroupValue(slog.Attr{Key: "", Value: slog.AnyValue((*time.Time)(nil))}) },
	}
	if depth > 0 {
		gen = append(gen,
			func() slog.Value { return slog.GroupValue(attrs(rng, depth-1)...) },
			func() slog.Value {
				return slog.GroupValue(slog.Attr{Key: "", Value: slog.GroupValue(attrs(rng, depth-1)...)})
			},
		)
	}
	return gen
}

// attrs returns a few random attributes, groups up to depth deep.
func attrs(rng *rand.Rand, depth int) []slog.Attr {
	gen := values(rng, depth)
	out := make([]slog.Attr, rng.IntN(4))
	for i := range out {
		key := fmt.Sprintf("k%d", i)
		if rng.IntN(8) == 0 {
			key = ""
		}
		out[i] = slog.Attr{Key: key, Value: gen[rng.IntN(len(gen))]()}
	}
	return out
}

// TestHandlerNeverPanics logs every kind of slog.Value, alone and at
// random in groups nested up to three deep, through the redaction handler
// over the text and JSON handlers (with attributes added by With and
// WithGroup too): no call panics, every record is written as one line, a
// JSON line decodes, and the secret is never printed.
func TestHandlerNeverPanics(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, 2))
			var buf bytes.Buffer
			var next slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
			if format == "json" {
				next = slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
			}
			h := NewHandler(next, New(secret))
			logOne := func(name string, hh slog.Handler, as []slog.Attr) {
				t.Helper()
				buf.Reset()
				rec := slog.NewRecord(time.Time{}, slog.LevelError, "message with "+secret, 0)
				rec.AddAttrs(as...)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%s: Handle panicked: %v (attrs %v)", name, r, describe(as))
						}
					}()
					if err := hh.Handle(context.Background(), rec); err != nil {
						t.Logf("%s: Handle: %v", name, err) // a handler may refuse a value; it may not panic
					}
				}()
				out := buf.String()
				if strings.Contains(out, secret) {
					t.Errorf("%s: the secret was printed: %s", name, out)
				}
				if out != "" && strings.Count(out, "\n") != 1 {
					t.Errorf("%s: not one line: %q", name, out)
				}
				if format == "json" && out != "" && !json.Valid([]byte(out)) {
					t.Errorf("%s: not JSON: %s (attrs %s)", name, out, describe(as))
				}
			}
			// Each kind alone, at the top, in a group and after With.
			for i, g := range values(rng, 1) {
				name := fmt.Sprintf("value %d (%s)", i, describe([]slog.Attr{{Key: "v", Value: g()}}))
				logOne(name, h, []slog.Attr{{Key: "v", Value: g()}})
				logOne(name+" in a group", h, []slog.Attr{slog.Group("g", slog.Attr{Key: "v", Value: g()})})
				var with slog.Handler
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%s: WithAttrs panicked: %v", name, r)
						}
					}()
					with = h.WithAttrs([]slog.Attr{{Key: "w", Value: g()}}).WithGroup("grp").WithAttrs([]slog.Attr{{Key: "w2", Value: g()}})
				}()
				logOne(name+" through With", with, nil)
			}
			// Random mixes.
			for i := range 3000 {
				logOne(fmt.Sprintf("mix %d", i), h, attrs(rng, 3))
			}
		})
	}
}

// describe names the types of as without calling their methods.
func describe(as []slog.Attr) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "%s=%s:%T ", a.Key, a.Value.Kind(), a.Value.Any())
	}
	return b.String()
}
