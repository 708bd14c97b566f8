package config

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults for settings that neither a source nor lookout.yaml sets.
const (
	EveryDefault            = 5 * time.Minute
	TimeoutDefault          = 30 * time.Second
	OllamaHostDefault       = "http://127.0.0.1:11434"
	OllamaModelDefault      = "llama3.2"
	OllamaTimeoutDefault    = 60 * time.Second
	OllamaConcurrency       = 2
	SinkTimeoutDefault      = 10 * time.Second
	SinkMaxAttemptsDefault  = 8
	SyncerLeaseDefault      = 5 * time.Minute
	SyncerConcurrency       = 4
	SyncerPollDefault       = time.Second
	BatchSizeDefault        = 500
	EvaluatorLeaseDefault   = 2 * time.Minute
	CatchUpIntervalDefault  = 30 * time.Second
	EvaluatorAttempsDefault = 10
)

// Connectors lists the connector names a source may use. The connectors
// package registry is the authority at build time; this list lets config
// check the connector block without importing every connector.
var Connectors = []string{"file", "github", "http", "rss"}

// SinkTypes lists the sink types a sink may have.
var SinkTypes = []string{"command", "email", "log", "slack", "webhook"}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func (g *Global) applyDefaults() []error {
	var errs []error
	g.Ollama.Host = cmp.Or(g.Ollama.Host, OllamaHostDefault)
	g.Ollama.Model = cmp.Or(g.Ollama.Model, OllamaModelDefault)
	g.Ollama.Timeout = cmp.Or(g.Ollama.Timeout, OllamaTimeoutDefault)
	g.Ollama.Concurrency = cmp.Or(g.Ollama.Concurrency, OllamaConcurrency)
	if g.Ollama.Options == nil {
		g.Ollama.Options = map[string]any{"temperature": 0, "seed": 42}
	}
	if len(g.Sinks) == 0 {
		g.Sinks = map[string]*Sink{"log": {Type: "log"}}
	}
	for name, s := range g.Sinks {
		if s == nil {
			s = &Sink{}
			g.Sinks[name] = s
		}
		s.name = name
		key := "sinks." + name
		if !nameRE.MatchString(name) {
			errs = append(errs, g.Errorf(key, "is not a valid sink name (letters, digits, '-', '_', '.')"))
		}
		s.Timeout = cmp.Or(s.Timeout, SinkTimeoutDefault)
		s.MaxAttempts = cmp.Or(s.MaxAttempts, SinkMaxAttemptsDefault)
		switch s.Type {
		case "":
			errs = append(errs, g.Errorf(key+".type", "is required (one of %s)", strings.Join(SinkTypes, ", ")))
		case "webhook", "slack":
			if s.URL == "" {
				errs = append(errs, g.Errorf(key+".url", "is required for a %s sink", s.Type))
			}
		case "email":
			if s.SMTP == nil || s.SMTP.Host == "" || s.SMTP.From == "" || len(s.SMTP.To) == 0 {
				errs = append(errs, g.Errorf(key+".smtp", "needs host, from and to for an email sink"))
			}
		case "command":
			if len(s.Command) == 0 {
				errs = append(errs, g.Errorf(key+".command", "is required for a command sink"))
			}
		case "log":
		default:
			errs = append(errs, g.Errorf(key+".type", "%q is not a sink type (known: %s)", s.Type, strings.Join(SinkTypes, ", ")))
		}
	}
	d := &g.Defaults
	d.Every = cmp.Or(d.Every, EveryDefault)
	d.Timeout = cmp.Or(d.Timeout, TimeoutDefault)
	if d.RateLimit.PerSecond == 0 {
		d.RateLimit.PerSecond = 1
	}
	d.RateLimit.Burst = cmp.Or(d.RateLimit.Burst, 1)
	if len(d.Notify) == 0 {
		for name := range g.Sinks {
			d.Notify = append(d.Notify, name)
		}
		slices.Sort(d.Notify)
		if len(d.Notify) > 1 {
			d.Notify = d.Notify[:0]
			if _, ok := g.Sinks["log"]; ok {
				d.Notify = []string{"log"}
			}
		}
	}
	for _, n := range d.Notify {
		if g.Sinks[n] == nil {
			errs = append(errs, g.Errorf("defaults.notify", "names sink %q, which lookout.yaml does not declare", n))
		}
	}
	g.Syncer.Lease = cmp.Or(g.Syncer.Lease, SyncerLeaseDefault)
	g.Syncer.Concurrency = cmp.Or(g.Syncer.Concurrency, SyncerConcurrency)
	g.Syncer.PollInterval = cmp.Or(g.Syncer.PollInterval, SyncerPollDefault)
	g.Syncer.BatchSize = cmp.Or(g.Syncer.BatchSize, BatchSizeDefault)
	g.Evaluator.Lease = cmp.Or(g.Evaluator.Lease, EvaluatorLeaseDefault)
	g.Evaluator.BatchSize = cmp.Or(g.Evaluator.BatchSize, BatchSizeDefault)
	g.Evaluator.CatchUpInterval = cmp.Or(g.Evaluator.CatchUpInterval, CatchUpIntervalDefault)
	g.Evaluator.MaxAttempts = cmp.Or(g.Evaluator.MaxAttempts, EvaluatorAttempsDefault)
	g.Log.Format = cmp.Or(g.Log.Format, "text")
	g.Log.Level = cmp.Or(g.Log.Level, "info")
	if g.Log.Format != "text" && g.Log.Format != "json" {
		errs = append(errs, g.Errorf("log.format", "must be text or json, not %q", g.Log.Format))
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, g.Log.Level) {
		errs = append(errs, g.Errorf("log.level", "must be debug, info, warn or error, not %q", g.Log.Level))
	}
	if g.Syncer.BatchSize < 1 || g.Syncer.BatchSize > 10000 {
		errs = append(errs, g.Errorf("syncer.batch_size", "must be between 1 and 10000"))
	}
	return errs
}

// validate applies defaults from g and checks the source. Expressions are
// compiled later, by the packages that run them, with errors located here.
func (s *Source) validate(g *Global) []error {
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, s.Errorf(key, format, args...)) }

	switch {
	case s.Name == "":
		bad("name", "is required")
	case !nameRE.MatchString(s.Name):
		bad("name", "%q is not a valid name (letters, digits, '-', '_', '.')", s.Name)
	}
	blocks := map[string]bool{"file": s.File != nil, "http": s.HTTP != nil, "rss": s.RSS != nil, "github": s.GitHub != nil}
	switch {
	case s.Connector == "":
		bad("connector", "is required (one of %s)", strings.Join(Connectors, ", "))
	case !slices.Contains(Connectors, s.Connector):
		bad("connector", "%q is not known (known: %s)", s.Connector, strings.Join(Connectors, ", "))
	case !blocks[s.Connector]:
		errs = append(errs, &Error{File: s.Path, Line: s.Line("connector"), Key: s.Connector, Msg: fmt.Sprintf("block is required for connector %q", s.Connector)})
	}
	for name, set := range blocks {
		if set && name != s.Connector {
			bad(name, "block is set but the connector is %q", s.Connector)
		}
	}

	if s.Cron != "" && s.Every != 0 {
		bad("cron", "and every are exclusive: set one schedule")
	}
	if s.Every < 0 {
		bad("every", "must be positive")
	}
	if s.Cron == "" {
		s.Every = cmp.Or(s.Every, g.Defaults.Every)
	}
	if s.Jitter == nil {
		if g.Defaults.Jitter != nil {
			s.Jitter = g.Defaults.Jitter
		} else {
			j := s.Every / 10
			s.Jitter = &j
		}
	}
	if *s.Jitter < 0 {
		bad("jitter", "must not be negative")
	}
	s.Timezone = cmp.Or(s.Timezone, "UTC")
	if _, err := time.LoadLocation(s.Timezone); err != nil {
		bad("timezone", "%q is not a known time zone", s.Timezone)
	}
	if a := s.Adaptive; a != nil {
		if a.Min <= 0 || a.Max <= 0 {
			bad("adaptive", "needs min and max, both positive")
		} else if a.Min > a.Max {
			bad("adaptive.min", "must not exceed adaptive.max")
		}
	}
	if s.RateLimit == nil {
		rl := g.Defaults.RateLimit
		s.RateLimit = &rl
	} else {
		if s.RateLimit.PerSecond <= 0 {
			bad("rate_limit.per_second", "must be > 0")
		}
		s.RateLimit.Burst = cmp.Or(s.RateLimit.Burst, 1)
		if s.RateLimit.Burst < 1 {
			bad("rate_limit.burst", "must be >= 1")
		}
	}
	s.Timeout = cmp.Or(s.Timeout, g.Defaults.Timeout)
	if st := s.Stop; st != nil && st.MaxFailures < 0 {
		bad("stop.max_failures", "must not be negative")
	}

	if s.Connector != "" && blocks[s.Connector] {
		errs = append(errs, s.validateConnector()...)
	}

	seen := map[string]bool{}
	for i, w := range s.Watches {
		key := fmt.Sprintf("watches[%d]", i)
		if w == nil {
			bad(key, "is empty")
			continue
		}
		switch {
		case w.Name == "":
			bad(key+".name", "is required")
		case !nameRE.MatchString(w.Name):
			bad(key+".name", "%q is not a valid name (letters, digits, '-', '_', '.')", w.Name)
		case seen[w.Name]:
			bad(key+".name", "%q is used by another watch of this source", w.Name)
		}
		seen[w.Name] = true
		w.When = cmp.Or(strings.TrimSpace(w.When), "true")
		if len(w.Notify) == 0 {
			w.Notify = g.Defaults.Notify
		}
		for j, n := range w.Notify {
			if g.Sinks[n] == nil {
				bad(fmt.Sprintf("%s.notify[%d]", key, j), "names sink %q, which lookout.yaml does not declare (declared: %s)", n, strings.Join(sinkNames(g), ", "))
			}
		}
		w.OnModelError = cmp.Or(w.OnModelError, "hold")
		if !slices.Contains([]string{"hold", "notify", "skip"}, w.OnModelError) {
			bad(key+".on_model_error", "must be hold, notify or skip, not %q", w.OnModelError)
		}
		w.Urgency = cmp.Or(w.Urgency, "medium")
		if !slices.Contains([]string{"low", "medium", "high"}, w.Urgency) {
			bad(key+".urgency", "must be low, medium or high, not %q", w.Urgency)
		}
		w.Dedupe = cmp.Or(w.Dedupe, "version")
		if w.Dedupe != "version" && w.Dedupe != "record" {
			if d, err := time.ParseDuration(w.Dedupe); err != nil || d <= 0 {
				bad(key+".dedupe", "must be version, record or a positive duration such as 1h, not %q", w.Dedupe)
			}
		}
		if w.Digest != nil && w.Digest.Cron == "" {
			bad(key+".digest.cron", "is required")
		}
	}
	return errs
}

// DedupeWindow returns the window of a duration dedupe policy, or 0.
func (w *Watch) DedupeWindow() time.Duration {
	d, err := time.ParseDuration(w.Dedupe)
	if err != nil {
		return 0
	}
	return d
}

func sinkNames(g *Global) []string {
	names := make([]string, 0, len(g.Sinks))
	for n := range g.Sinks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
