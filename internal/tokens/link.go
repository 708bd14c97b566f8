package tokens

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A sign-in link opens a user's page (/me) as the owner of the token that
// minted it: an assistant asks for one and hands it over, so that the
// person it acts for needs no token of their own. A link is 32 random
// bytes shown once ("lkl_" + base64url); only its SHA-256 is stored. It
// expires within minutes and is used once: Redeem marks it used in the
// transaction that reads it (under a row lock), so that two redemptions
// of one link cannot both succeed.

// LinkPrefix starts every sign-in link's secret.
const LinkPrefix = "lkl_"

// Refusals of RedeemLink; each says what to do.
var (
	// ErrLinkUnknown is a link that was never made (or mistyped).
	ErrLinkUnknown = errors.New("this sign-in link is not known: ask your assistant for a new one (me_link), or sign in with your token")
	// ErrLinkUsed is a link that already signed someone in.
	ErrLinkUsed = errors.New("this sign-in link was used already (a link signs in once): ask your assistant for a new one (me_link)")
	// ErrLinkExpired is a link past its expiry.
	ErrLinkExpired = errors.New("this sign-in link expired (links last minutes): ask your assistant for a new one (me_link)")
)

// Link is a sign_in_links row; it never holds the secret.
type Link struct {
	ID        int64
	TokenID   int64
	Owner     string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    *time.Time
}

// CreateLink makes a sign-in link of token tokenID of owner, valid from
// now until expires, and returns it with its secret (shown once, recorded
// nowhere).
func CreateLink(ctx context.Context, q Querier, tokenID int64, owner string, now, expires time.Time) (*Link, string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", fmt.Errorf("create sign-in link: random: %w", err)
	}
	secret := LinkPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	h := hash(secret)
	l, err := scanLink(q.QueryRow(ctx, queryCreateLink, h[:], tokenID, owner, now, expires))
	if err != nil {
		return nil, "", fmt.Errorf("create sign-in link of token %d: %w", tokenID, err)
	}
	return l, secret, nil
}

// RedeemLink uses the sign-in link secret at now, in tx, and returns it
// with its token: ErrLinkUnknown, ErrLinkUsed, ErrLinkExpired, or the
// token's ErrRevoked or ErrExpired (a link of a revoked token opens
// nothing). Only a redemption that succeeds marks the link used.
func RedeemLink(ctx context.Context, tx pgx.Tx, secret string, now time.Time) (*Link, *Token, error) {
	h := hash(secret)
	l, err := scanLink(tx.QueryRow(ctx, queryLockLink, h[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrLinkUnknown
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read sign-in link: %w", err)
	}
	switch {
	case l.UsedAt != nil:
		return nil, nil, ErrLinkUsed
	case !now.Before(l.ExpiresAt):
		return nil, nil, ErrLinkExpired
	}
	tok, _, err := sessionKey(ctx, tx, l.TokenID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil, ErrLinkUnknown
	case err != nil:
		return nil, nil, err
	case tok.RevokedAt != nil:
		return nil, nil, ErrRevoked
	case tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt):
		return nil, nil, ErrExpired
	}
	tag, err := tx.Exec(ctx, queryUseLink, l.ID, now)
	if err != nil {
		return nil, nil, fmt.Errorf("use sign-in link %d: %w", l.ID, err)
	}
	if tag.RowsAffected() != 1 { // the row lock makes this unreachable; a second guard
		return nil, nil, ErrLinkUsed
	}
	l.UsedAt = &now
	return l, tok, nil
}

func scanLink(row pgx.Row) (*Link, error) {
	l := &Link{}
	if err := row.Scan(&l.ID, &l.TokenID, &l.Owner, &l.CreatedAt, &l.ExpiresAt, &l.UsedAt); err != nil {
		return nil, err
	}
	return l, nil
}

// PruneLinks deletes at most limit sign-in links that expired, or were
// used, before before (a link opens /me once, within its hour at most:
// past that it only records that it was made) and returns how many.
// internal/retention calls it, with retention.sign_in_links, until a
// batch is short.
func PruneLinks(ctx context.Context, q Querier, before time.Time, limit int) (int64, error) {
	tag, err := q.Exec(ctx, queryPruneLinks, before, limit)
	if err != nil {
		return 0, fmt.Errorf("prune sign-in links expired or used before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// CountPrunableLinks counts the links PruneLinks would delete (a dry run).
func CountPrunableLinks(ctx context.Context, q Querier, before time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, queryCountPrunableLinks, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("count sign-in links expired or used before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
