// Package control is the service layer of the api deployment: what an
// assistant and its user can do with lookout at runtime — read the
// notifications of their watches (a page, or a live stream), describe a
// source's records before writing a watch, and (with the definitions
// store) create, change and remove watches and sources. The HTTP handlers
// (internal/api) and the MCP tools call it; they stay thin.
//
// Every method takes the Principal of the request and scopes what it
// reads and changes to its owner; an admin sees everything. An object of
// another owner does not exist for the caller (NotFoundError, not a
// refusal), so that Bob cannot learn what Alice watches. Errors are typed
// (errors.go) so that each transport maps them to its own form:
// problem+json for HTTP, a tool error for MCP.
package control

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// Principal is who makes a request: the owner of its token and its scope.
type Principal struct {
	Owner string
	Admin bool
	// TokenID is the token's id (0 for the api binary's own commands).
	TokenID int64
	// Via is the channel: audit.ViaAPI, audit.ViaMCP or audit.ViaCLI.
	Via string
	// RequestID names the request in logs and the audit log.
	RequestID string
}

// listOwner is the owner a listing is restricted to: p's own objects, or
// every owner's ("") for an admin.
func (p Principal) listOwner() string {
	if p.Admin {
		return ""
	}
	return p.Owner
}

// Limits bound what one owner may have; 0 is no limit.
type Limits struct {
	// Watches an owner may have. Defaults to 100.
	Watches int `json:"watches" doc:"Watches you may have (0: no limit)."`
	// Sources an owner may create. Defaults to 20.
	Sources int `json:"sources" doc:"Sources you may create (0: no limit)."`
	// ModelCallsPerDay an owner's watches may make. Defaults to 1000.
	ModelCallsPerDay int `json:"model_calls_per_day" doc:"Model calls your watches may make per UTC day (0: no limit)."`
}

// Config is the service's configuration.
type Config struct {
	// Limits per owner.
	Limits Limits
	// StreamPoll is how often a notification stream looks for new rows
	// without a wake-up. Defaults to 5s.
	StreamPoll time.Duration
	// StreamLookback is how far back a stream looks again for rows whose
	// transaction committed after a newer row's. Defaults to 1m.
	StreamLookback time.Duration
	// Keys seal the secrets of API users; nil refuses to store any.
	Keys *secrets.Ring
	// PublicURL is the address people open the api at
	// ("https://lookout.example", env LOOKOUT_PUBLIC_URL): a sign-in
	// link's url starts with it. Defaults to none (a link has its path
	// only).
	PublicURL string
	// AllowPrivate lets sources created through the API reach loopback
	// and private addresses (api.allow_private). Defaults to false.
	AllowPrivate bool
	// DryRunWait is how long a dry run with use_model waits for an
	// evaluator to answer it (it then fails, naming the request). Defaults
	// to 60s.
	DryRunWait time.Duration
	// Drift is lookout.yaml's ollama.drift block (report_model_drift's
	// settings); nil when drift is off. Defaults to nil.
	Drift *config.Drift
}

// Service is the control plane's logic over one database.
type Service struct {
	pool     *pgxpool.Pool
	conf     Config
	store    *definitions.Store
	hub      *Hub
	resolver Resolver
	logger   *slog.Logger
	previews chan struct{} // a turn of Preview each
}

// New returns a service over pool and the definitions store. hub wakes
// notification streams (nil: streams poll every StreamPoll).
func New(pool *pgxpool.Pool, store *definitions.Store, hub *Hub, conf Config, logger *slog.Logger) *Service {
	if conf.StreamPoll <= 0 {
		conf.StreamPoll = 5 * time.Second
	}
	if conf.StreamLookback <= 0 {
		conf.StreamLookback = time.Minute
	}
	if conf.DryRunWait <= 0 {
		conf.DryRunWait = time.Minute
	}
	return &Service{pool: pool, conf: conf, store: store, hub: hub, resolver: net.DefaultResolver, logger: logger.With("component", "control"),
		previews: make(chan struct{}, PreviewConcurrency)}
}

// scope returns the outbox selection of p's notifications.
func (s *Service) scope(ctx context.Context, p Principal) (outbox.PageQuery, error) {
	if p.Admin {
		return outbox.PageQuery{All: true}, nil
	}
	return outbox.PageQuery{Owner: p.Owner}, nil
}

// Limits returns the per-owner limits in force.
func (s *Service) Limits() Limits { return s.conf.Limits }

// SetResolver replaces the resolver of CheckURL (tests).
func (s *Service) SetResolver(r Resolver) { s.resolver = r }

// SetLimits replaces the per-owner limits (tests).
func (s *Service) SetLimits(l Limits) { s.conf.Limits = l }
