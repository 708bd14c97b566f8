package tokens

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A session is what a browser holds instead of a token: the token's id, an
// expiry, a random nonce, and an HMAC of the three keyed by a key derived
// from the token's stored hash. It is signed, not stored: any replica
// verifies it with the database alone, and revoking (or expiring) the token
// ends its sessions at once. Someone who can read api_tokens could forge
// one; such a reader can read everything else too.

// ErrBadSession is a session value that is malformed, forged, or expired.
var ErrBadSession = errors.New("the session is not valid (malformed, tampered with or expired): sign in again")

const sessionLen = 8 + 8 + 16 + sha256.Size

// Pages a session is for: a session of one page is not one of the other
// (its signature is keyed by its page), so that a session a user's page
// made from an admin token opens no admin page.
const (
	// PageAdmin is the admin page's session (/admin).
	PageAdmin = "admin"
	// PageMe is a user's page's session (/me).
	PageMe = "me"
)

// Session is a verified session.
type Session struct {
	// Page is what the session is for: PageAdmin or PageMe.
	Page    string
	Token   *Token
	Expires time.Time
	// Nonce tells sessions of one token apart (CSRF tokens are bound to it).
	Nonce []byte
	key   [32]byte
}

// NewSession returns the value of a new admin page session of tok (which
// Authenticate returned) that expires at expires.
func NewSession(ctx context.Context, q Querier, tok *Token, expires time.Time) (string, *Session, error) {
	return NewPageSession(ctx, q, PageAdmin, tok, expires)
}

// NewPageSession returns the value of a new session of page (PageAdmin,
// PageMe) of tok that expires at expires.
func NewPageSession(ctx context.Context, q Querier, page string, tok *Token, expires time.Time) (string, *Session, error) {
	_, key, err := sessionKey(ctx, q, tok.ID)
	if err != nil {
		return "", nil, err
	}
	s := &Session{Page: page, Token: tok, Expires: expires, Nonce: make([]byte, 16), key: key}
	if _, err := rand.Read(s.Nonce); err != nil {
		return "", nil, fmt.Errorf("new session: random: %w", err)
	}
	buf := make([]byte, 0, sessionLen)
	buf = binary.BigEndian.AppendUint64(buf, uint64(tok.ID))
	buf = binary.BigEndian.AppendUint64(buf, uint64(expires.Unix()))
	buf = append(buf, s.Nonce...)
	buf = append(buf, s.mac(buf)...)
	return base64.RawURLEncoding.EncodeToString(buf), s, nil
}

// VerifySession checks an admin page session value: well formed, signed
// with its token's key, not expired, and its token neither revoked nor
// expired. It returns ErrBadSession, ErrRevoked, ErrExpired, or a
// database error.
func VerifySession(ctx context.Context, q Querier, value string, now time.Time) (*Session, error) {
	return VerifyPageSession(ctx, q, PageAdmin, value, now)
}

// VerifyPageSession checks a session value of page as VerifySession does;
// a session of another page is ErrBadSession.
func VerifyPageSession(ctx context.Context, q Querier, page, value string, now time.Time) (*Session, error) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) != sessionLen {
		return nil, ErrBadSession
	}
	id := int64(binary.BigEndian.Uint64(raw[0:8]))
	expires := time.Unix(int64(binary.BigEndian.Uint64(raw[8:16])), 0)
	tok, key, err := sessionKey(ctx, q, id)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrBadSession
	}
	if err != nil {
		return nil, err
	}
	s := &Session{Page: page, Token: tok, Expires: expires, Nonce: raw[16:32], key: key}
	if subtle.ConstantTimeCompare(s.mac(raw[:32]), raw[32:]) != 1 {
		return nil, ErrBadSession
	}
	switch {
	case !now.Before(expires):
		return nil, ErrBadSession
	case tok.RevokedAt != nil:
		return nil, ErrRevoked
	case tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt):
		return nil, ErrExpired
	}
	return s, nil
}

// Bind returns an HMAC of purpose under the session's key and nonce: a
// value only this session's holder can know (its CSRF token).
func (s *Session) Bind(purpose string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write(s.Nonce)
	m.Write([]byte("\x00" + purpose))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Session) mac(b []byte) []byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte("lookout " + cmp.Or(s.Page, PageAdmin) + " session\x00"))
	m.Write(b)
	return m.Sum(nil)
}

// sessionKey reads token id and derives its session key from its stored
// hash.
func sessionKey(ctx context.Context, q Querier, id int64) (*Token, [32]byte, error) {
	var key [32]byte
	var stored []byte
	t := &Token{}
	err := q.QueryRow(ctx, queryByID, id).Scan(&t.ID, &t.Owner, &t.Scope, &t.Name, &t.Prefix, &t.CreatedAt,
		&t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, key, ErrNotFound
	}
	if err != nil {
		return nil, key, fmt.Errorf("read token %d: %w", id, err)
	}
	m := hmac.New(sha256.New, stored)
	m.Write([]byte("lookout session key"))
	copy(key[:], m.Sum(nil))
	return t, key, nil
}
