package control

import (
	"context"
	"time"

	"github.com/lookout-dev/lookout/internal/tokens"
)

// Authenticate returns the token whose secret is given (tokens.Authenticate).
func (s *Service) Authenticate(ctx context.Context, secret string) (*tokens.Token, error) {
	return tokens.Authenticate(ctx, s.pool, secret)
}

// NewSession returns the value of a new admin page session of tok.
func (s *Service) NewSession(ctx context.Context, tok *tokens.Token, expires time.Time) (string, error) {
	v, _, err := tokens.NewSession(ctx, s.pool, tok, expires)
	return v, err
}

// VerifySession checks an admin page session value (tokens.VerifySession).
func (s *Service) VerifySession(ctx context.Context, value string, now time.Time) (*tokens.Session, error) {
	return tokens.VerifySession(ctx, s.pool, value, now)
}
