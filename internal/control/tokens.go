package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// IssueToken creates a token and audits it in one transaction; the secret
// is returned once and recorded nowhere.
func IssueToken(ctx context.Context, pool *pgxpool.Pool, by Principal, n tokens.NewToken) (*tokens.Token, string, error) {
	var tok *tokens.Token
	var secret string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if tok, secret, err = tokens.Create(ctx, tx, n); err != nil {
			return err
		}
		return audit.Record(ctx, tx, entry(by, "create", "token", strconv.FormatInt(tok.ID, 10), tok.Owner), nil, tok)
	})
	if err != nil {
		return nil, "", err
	}
	return tok, secret, nil
}

// RevokeToken revokes token id and audits it; a user may revoke only its
// owner's tokens (another's is not found).
func RevokeToken(ctx context.Context, pool *pgxpool.Pool, by Principal, id int64) (*tokens.Token, error) {
	owner := by.Owner
	if by.Admin {
		owner = ""
	}
	var tok *tokens.Token
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if tok, err = tokens.Revoke(ctx, tx, id, owner); err != nil {
			return err
		}
		return audit.Record(ctx, tx, entry(by, "revoke", "token", strconv.FormatInt(id, 10), tok.Owner), nil, tok)
	})
	if errors.Is(err, tokens.ErrNotFound) {
		return nil, &NotFoundError{Kind: "token", Name: strconv.FormatInt(id, 10)}
	}
	if err != nil {
		return nil, fmt.Errorf("revoke token %d: %w", id, err)
	}
	return tok, nil
}

// entry starts an audit entry of p's change.
func entry(p Principal, action, kind, target, owner string) audit.Entry {
	e := audit.Entry{Actor: p.Owner, Via: p.Via, Action: action, Kind: kind, Target: target, Owner: owner, RequestID: p.RequestID}
	if p.TokenID != 0 {
		id := p.TokenID
		e.TokenID = &id
	}
	if e.Via == "" {
		e.Via = audit.ViaAPI
	}
	return e
}
