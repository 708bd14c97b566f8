// Package tokens owns the api_tokens table: the bearer tokens of the HTTP
// API and MCP. A token is 32 random bytes, shown once when it is created
// ("lk_" + base64url); only its SHA-256 is stored, with a short prefix
// for people to tell tokens apart. Authenticate looks a token up by its
// hash and compares in constant time; revoked and expired tokens are
// refused with errors that say which. Named queries are in queries.go.
package tokens

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: a pgx.Tx, a *pgxpool.Pool or a *pgx.Conn.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Scopes of a token.
const (
	// ScopeUser sees and changes its owner's objects only.
	ScopeUser = "user"
	// ScopeAdmin sees and changes every owner's objects.
	ScopeAdmin = "admin"
)

// Prefix starts every token, so that secret scanners and people recognise one.
const Prefix = "lk_"

// Token is an api_tokens row; it never holds the secret.
type Token struct {
	ID         int64      `json:"id"`
	Owner      string     `json:"owner"`
	Scope      string     `json:"scope"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Admin reports whether the token has the admin scope.
func (t *Token) Admin() bool { return t.Scope == ScopeAdmin }

// NewToken is what Create makes.
type NewToken struct {
	Owner string
	// Scope is user or admin. Defaults to user.
	Scope string
	// Name is a label for people ("alice's laptop"). Defaults to "".
	Name string
	// TTL makes the token expire after it; 0 never expires. Defaults to 0.
	TTL time.Duration
}

// Errors of Authenticate. Each says what the client should do.
var (
	ErrMissing = errors.New("no bearer token: send the header Authorization: Bearer <token> (an operator creates one with `api token create --owner NAME`)")
	ErrUnknown = errors.New("the bearer token is not known: check that it was copied whole (it starts with lk_), or ask an operator for a new one")
	ErrRevoked = errors.New("the bearer token was revoked: ask an operator for a new one")
	ErrExpired = errors.New("the bearer token expired: ask an operator for a new one")
)

// ErrNotFound is a token id that does not exist.
var ErrNotFound = errors.New("no such token")

// Create stores a new token and returns its row and the secret, which is
// not kept anywhere: show it once.
func Create(ctx context.Context, q Querier, n NewToken) (*Token, string, error) {
	if strings.TrimSpace(n.Owner) == "" {
		return nil, "", errors.New("create token: owner is empty")
	}
	scope := n.Scope
	if scope == "" {
		scope = ScopeUser
	}
	if scope != ScopeUser && scope != ScopeAdmin {
		return nil, "", fmt.Errorf("create token: scope %q is neither user nor admin", scope)
	}
	if n.TTL < 0 {
		return nil, "", fmt.Errorf("create token: ttl %s is negative", n.TTL)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, "", fmt.Errorf("create token: random: %w", err)
	}
	secret := Prefix + base64.RawURLEncoding.EncodeToString(raw[:])
	h := hash(secret)
	var expires *time.Time
	if n.TTL > 0 {
		e := time.Now().Add(n.TTL)
		expires = &e
	}
	t, err := scanOne(q.Query(ctx, queryCreate, n.Owner, scope, n.Name, secret[:len(Prefix)+6], h[:], expires))
	if err != nil {
		return nil, "", fmt.Errorf("create token for %s: %w", n.Owner, err)
	}
	return t, secret, nil
}

func hash(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Authenticate returns the token whose secret is given, and records its
// use (last_used_at, at most once a minute per token). It returns
// ErrMissing, ErrUnknown, ErrRevoked or ErrExpired for a token that may
// not be used, or another error when the database fails.
func Authenticate(ctx context.Context, q Querier, secret string) (*Token, error) {
	if secret == "" {
		return nil, ErrMissing
	}
	if !strings.HasPrefix(secret, Prefix) || len(secret) > 200 {
		return nil, ErrUnknown
	}
	h := hash(secret)
	var stored []byte
	t := &Token{}
	err := q.QueryRow(ctx, queryByHash, h[:]).Scan(&t.ID, &t.Owner, &t.Scope, &t.Name, &t.Prefix, &t.CreatedAt,
		&t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate token: %w", err)
	}
	// The lookup was by hash; compare again in constant time so that the
	// answer never depends on how much of a guess matched.
	if subtle.ConstantTimeCompare(stored, h[:]) != 1 {
		return nil, ErrUnknown
	}
	now := time.Now()
	switch {
	case t.RevokedAt != nil:
		return nil, ErrRevoked
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return nil, ErrExpired
	}
	if t.LastUsedAt == nil || now.Sub(*t.LastUsedAt) > time.Minute {
		if _, err := q.Exec(ctx, queryTouch, t.ID); err != nil {
			return nil, fmt.Errorf("record use of token %d: %w", t.ID, err)
		}
		t.LastUsedAt = &now
	}
	return t, nil
}

// Revoke revokes token id (of owner, unless owner is ""); revoking a
// revoked token is no error. It returns the token as it is now, or
// ErrNotFound.
func Revoke(ctx context.Context, q Querier, id int64, owner string) (*Token, error) {
	t, err := scanOne(q.Query(ctx, queryRevoke, id, owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("revoke token %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("revoke token %d: %w", id, err)
	}
	return t, nil
}

// List returns the tokens of owner ("" for every owner), oldest first,
// revoked ones included.
func List(ctx context.Context, q Querier, owner string) ([]Token, error) {
	rows, err := q.Query(ctx, queryList, owner)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanToken)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

func scanToken(r pgx.CollectableRow) (Token, error) {
	var t Token
	err := r.Scan(&t.ID, &t.Owner, &t.Scope, &t.Name, &t.Prefix, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt)
	return t, err
}

func scanOne(rows pgx.Rows, err error) (*Token, error) {
	if err != nil {
		return nil, err
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanToken)
	if err != nil {
		return nil, err
	}
	return &t, nil
}
