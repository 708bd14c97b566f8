package control

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// Sign-in links of a user's page (docs/me.md): an assistant mints one for
// the person it acts for, who opens /me with it once, within minutes, as
// the owner of the token that minted it (never as an admin).

// Bounds of a sign-in link's life.
const (
	// SignInLinkTTLDefault is how long a link lasts unless asked.
	SignInLinkTTLDefault = 10 * time.Minute
	// SignInLinkTTLMax is the longest a link may last.
	SignInLinkTTLMax = time.Hour
)

// SignInLinkPath is the path of the page a sign-in link opens; the
// link's secret is its code parameter.
const SignInLinkPath = "/me/link"

// SignInLink is a minted sign-in link.
type SignInLink struct {
	Path      string    `json:"path" doc:"The link's path and query, /me/link?code=lkl_...: open it on this API's address. It holds the link's secret, shown once."`
	URL       string    `json:"url,omitempty" doc:"The whole link, when the operator set the api's public address (LOOKOUT_PUBLIC_URL)."`
	Owner     string    `json:"owner" doc:"Whose page it opens."`
	ExpiresAt time.Time `json:"expires_at" doc:"Until when it may be used (once)."`
}

// MintSignInLink makes a sign-in link of p's token, valid for ttl (0:
// SignInLinkTTLDefault; at most SignInLinkTTLMax) from now, audited. Its
// URL starts with Config.PublicURL (none without it).
func (s *Service) MintSignInLink(ctx context.Context, p Principal, ttl time.Duration, now time.Time) (*SignInLink, error) {
	base := strings.TrimRight(s.conf.PublicURL, "/")
	switch {
	case ttl == 0:
		ttl = SignInLinkTTLDefault
	case ttl < time.Minute || ttl > SignInLinkTTLMax:
		return nil, Invalid("/ttl", "must be a duration between 1m and 1h, e.g. 10m")
	}
	if p.TokenID == 0 {
		return nil, &ForbiddenError{Detail: "a sign-in link is minted with a token (it opens the page as the token's owner), and this request has none"}
	}
	var out *SignInLink
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		l, secret, err := tokens.CreateLink(ctx, tx, p.TokenID, p.Owner, now, now.Add(ttl))
		if err != nil {
			return err
		}
		out = &SignInLink{Path: SignInLinkPath + "?code=" + url.QueryEscape(secret), Owner: l.Owner, ExpiresAt: l.ExpiresAt}
		if base != "" {
			out.URL = base + out.Path
		}
		shown := map[string]any{"id": l.ID, "token_id": l.TokenID, "owner": l.Owner, "expires_at": l.ExpiresAt}
		return audit.Record(ctx, tx, entry(p, "create", "sign_in_link", strconv.FormatInt(l.ID, 10), l.Owner), nil, shown)
	})
	if err != nil {
		return nil, fmt.Errorf("mint sign-in link: %w", err)
	}
	return out, nil
}

// RedeemSignInLink uses the sign-in link secret at now (once) and returns
// the caller it signs in: its token's owner, never an admin. A refusal is
// an *AuthError (tokens.ErrLinkUnknown, ErrLinkUsed, ErrLinkExpired, or
// its token's ErrRevoked or ErrExpired). The use is audited (via me).
func (s *Service) RedeemSignInLink(ctx context.Context, secret string, now time.Time, requestID string) (*Auth, error) {
	var auth *Auth
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		l, tok, err := tokens.RedeemLink(ctx, tx, secret, now)
		if err != nil {
			return err
		}
		auth = &Auth{Token: tok, Principal: Principal{Owner: tok.Owner, TokenID: tok.ID, Via: audit.ViaMe, RequestID: requestID}}
		shown := map[string]any{"id": l.ID, "token_id": l.TokenID, "owner": l.Owner, "expires_at": l.ExpiresAt, "used_at": l.UsedAt}
		return audit.Record(ctx, tx, entry(auth.Principal, "use", "sign_in_link", strconv.FormatInt(l.ID, 10), l.Owner), nil, shown)
	})
	if err != nil {
		for _, refusal := range []error{tokens.ErrLinkUnknown, tokens.ErrLinkUsed, tokens.ErrLinkExpired, tokens.ErrRevoked, tokens.ErrExpired} {
			if errors.Is(err, refusal) {
				return nil, &AuthError{Err: refusal}
			}
		}
		return nil, fmt.Errorf("redeem sign-in link: %w", err)
	}
	return auth, nil
}
