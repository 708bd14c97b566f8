package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// Refusals of Authorize beside tokens' (ErrMissing, ErrUnknown,
// ErrRevoked, ErrExpired, ErrBadSession). Each says what to do.
var (
	// ErrNotBearer is an Authorization header of another scheme.
	ErrNotBearer = errors.New("the Authorization header must be `Bearer <token>`")
	// ErrNeedsAdmin is a user token where an admin token is needed.
	ErrNeedsAdmin = errors.New("this needs a token with the admin scope, and this one has the user scope: an operator makes one with `api token create --owner NAME --scope admin`")
)

// AuthUnavailable is what a transport answers when Authorize fails with
// an error that is not an AuthError: the database could not be asked.
const AuthUnavailable = "the token could not be checked (database unavailable); retry shortly"

// AuthError is a refusal of Authorize: the credentials may not be used
// (Err is one of tokens' errors or ErrNotBearer; a 401), or their token
// lacks the scope asked for (Forbidden, Err is ErrNeedsAdmin; a 403).
// Its text is what every transport shows.
type AuthError struct {
	Forbidden bool
	Err       error
}

func (e *AuthError) Error() string { return e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// Credentials are what a request presents, the first one set of: an
// Authorization header, a token given by itself, an admin page session.
type Credentials struct {
	// Header is the Authorization header as sent (HTTP, SSE, the admin
	// page). Defaults to none.
	Header string
	// Secret is a token given by itself (the sign-in form, the stdio MCP
	// server's token, a bearer token the MCP SDK parsed). Defaults to none.
	Secret string
	// Session is the value of a page's session (of Page). Defaults to
	// none.
	Session string
	// Page is the page a Session is for: tokens.PageAdmin or
	// tokens.PageMe; a session of another page is refused. Defaults to
	// tokens.PageAdmin.
	Page string
	// AsOwner makes the caller its token's owner even with an admin
	// token: a user's page (/me) acts as the owner, never as an admin.
	// Defaults to false.
	AsOwner bool
	// Admin asks for a token with the admin scope. Defaults to false
	// (any scope).
	Admin bool
	// Via is the channel of the Principal (audit.ViaAPI, ViaMCP,
	// ViaAdmin). Defaults to audit.ViaAPI.
	Via string
	// RequestID names the request in the Principal. Defaults to "".
	RequestID string
	// Now is the time a session is checked at. Defaults to time.Now().
	Now time.Time
}

// Auth is an authorized caller.
type Auth struct {
	Principal Principal
	Token     *tokens.Token
	// Session is the admin page session that authorized the request (nil
	// for a token).
	Session *tokens.Session
}

// BearerSecret returns the token of an Authorization header: ErrMissing
// for none or an empty one, ErrNotBearer for another scheme.
func BearerSecret(header string) (string, error) {
	header = strings.TrimSpace(header)
	if header == "" {
		return "", tokens.ErrMissing
	}
	scheme, secret, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "bearer") {
		return "", ErrNotBearer
	}
	if secret = strings.TrimSpace(secret); secret == "" {
		return "", tokens.ErrMissing
	}
	return secret, nil
}

// Authorize is the one check of a token (token → owner and scope) for
// every transport: the HTTP API and its stream, MCP over HTTP and stdio,
// the admin page and its sign-in. It returns the caller, an *AuthError
// whose text each transport shows as it is (401, or 403 when Forbidden),
// or another error when the database could not be asked (AuthUnavailable).
func (s *Service) Authorize(ctx context.Context, c Credentials) (*Auth, error) {
	var tok *tokens.Token
	var sess *tokens.Session
	var err error
	switch {
	case c.Header != "":
		var secret string
		if secret, err = BearerSecret(c.Header); err == nil {
			tok, err = tokens.Authenticate(ctx, s.pool, secret)
		}
	case c.Secret != "":
		tok, err = tokens.Authenticate(ctx, s.pool, strings.TrimSpace(c.Secret))
	case c.Session != "":
		now := c.Now
		if now.IsZero() {
			now = time.Now()
		}
		if sess, err = tokens.VerifyPageSession(ctx, s.pool, cmp.Or(c.Page, tokens.PageAdmin), c.Session, now); err == nil {
			tok = sess.Token
		}
	default:
		err = tokens.ErrMissing
	}
	if err != nil {
		for _, refusal := range []error{tokens.ErrMissing, tokens.ErrUnknown, tokens.ErrRevoked, tokens.ErrExpired, tokens.ErrBadSession, ErrNotBearer} {
			if errors.Is(err, refusal) {
				return nil, &AuthError{Err: refusal}
			}
		}
		return nil, fmt.Errorf("authorize: %w", err)
	}
	if c.Admin && !tok.Admin() {
		return nil, &AuthError{Forbidden: true, Err: ErrNeedsAdmin}
	}
	via := c.Via
	if via == "" {
		via = audit.ViaAPI
	}
	return &Auth{Token: tok, Session: sess,
		Principal: Principal{Owner: tok.Owner, Admin: tok.Admin() && !c.AsOwner, TokenID: tok.ID, Via: via, RequestID: c.RequestID}}, nil
}

// NewSession returns the value of a new admin page session of tok (a
// token Authorize returned) that expires at expires.
func (s *Service) NewSession(ctx context.Context, tok *tokens.Token, expires time.Time) (string, error) {
	v, _, err := tokens.NewSession(ctx, s.pool, tok, expires)
	return v, err
}

// NewPageSession returns the value of a new session of page
// (tokens.PageAdmin, tokens.PageMe) of tok that expires at expires.
func (s *Service) NewPageSession(ctx context.Context, page string, tok *tokens.Token, expires time.Time) (string, error) {
	v, _, err := tokens.NewPageSession(ctx, s.pool, page, tok, expires)
	return v, err
}

// Pages a session is for (Credentials.Page, NewPageSession).
const (
	// PageAdmin is the admin page (/admin).
	PageAdmin = tokens.PageAdmin
	// PageMe is a user's page (/me).
	PageMe = tokens.PageMe
)
