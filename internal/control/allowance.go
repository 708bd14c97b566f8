package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// DefaultWatchCalls is the budget.calls_per_day an API watch with an ask
// gets when it names none (within what remains of the owner's allowance).
const DefaultWatchCalls = 100

// queryAllowance sums what an owner's day of model calls is already
// spoken for, leaving out the watch $2/$3 (being replaced): the daily
// budgets of its watches with an ask (each bounds that watch's calls of
// the day, those already made included: model_budgets is kept by source
// and watch name), and the calls made today by its watches that no longer
// ask (deleted, or their ask dropped), which no budget bounds any more.
const queryAllowance = `
	WITH asking AS (
		SELECT source, name, coalesce((definition->'budget'->>'calls_per_day')::int, 0) AS budget
		FROM watches
		WHERE owner = $1 AND coalesce(definition->>'ask', '') <> '' AND NOT (source = $2 AND name = $3)
	)
	SELECT (SELECT coalesce(sum(budget), 0) FROM asking)::int,
	       (SELECT count(*) FROM model_calls mc
	        WHERE mc.owner = $1 AND mc.purpose IN ('evaluate', 'briefing')
	          AND mc.created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
	          AND NOT (mc.source = $2 AND mc.watch = $3)
	          AND NOT EXISTS (SELECT 1 FROM asking a WHERE a.source = mc.source AND a.name = mc.watch))::int`

// allotModelCalls keeps an owner's model calls within model_calls_per_day
// through the per-watch budgets the evaluators already enforce across
// replicas: every watch of p with an ask carries budget.calls_per_day, and
// those budgets, with the calls made today by p's watches that no longer
// ask (so that deleting a watch and making another does not buy a second
// allowance in one day), add up to at most the limit. A watch with an ask and no
// budget gets min(DefaultWatchCalls, what remains); one that asks for more
// than remains, or finds nothing left, is refused. The watch source/name
// (being replaced) is left out of the sum; pending adds the budgets of
// watches created in the same request. It returns the definition to
// store and the calls it allots (0 without an ask).
func (s *Service) allotModelCalls(ctx context.Context, tx pgx.Tx, p Principal, def json.RawMessage, pointer, source, name string, pending int) (json.RawMessage, int, error) {
	limit := s.conf.Limits.ModelCallsPerDay
	if limit <= 0 || p.Admin {
		return def, 0, nil
	}
	var w map[string]json.RawMessage // values as sent: numbers exact
	if err := json.Unmarshal(def, &w); err != nil {
		return def, 0, nil // the validation path reports it
	}
	var ask string
	if _ = json.Unmarshal(w["ask"], &ask); ask == "" {
		return def, 0, nil
	}
	var budgets, gone int
	if err := tx.QueryRow(ctx, queryAllowance, p.Owner, source, name).Scan(&budgets, &gone); err != nil {
		return nil, 0, fmt.Errorf("model call allowance of %s: %w", p.Owner, err)
	}
	used := budgets + gone + pending
	remaining := limit - used
	goneText := ""
	if gone > 0 {
		goneText = fmt.Sprintf(", and watches of yours that no longer ask (deleted, or changed) made %d calls today", gone)
	}
	taken := fmt.Sprintf("your other watches' budgets take %d%s", budgets+pending, goneText)
	var budget map[string]json.RawMessage
	_ = json.Unmarshal(w["budget"], &budget)
	var asked float64
	_ = json.Unmarshal(budget["calls_per_day"], &asked)
	switch {
	case remaining <= 0:
		return nil, 0, &LimitError{What: "model_calls_per_day", Limit: limit, Pointer: pointer + "/ask",
			Detail: fmt.Sprintf("your watches with an ask already have budgets of %d model calls per day%s, your limit of %d: lower the budget.calls_per_day of one, delete one, drop this watch's ask, or try again after midnight UTC", budgets+pending, goneText, limit)}
	case asked > float64(remaining):
		return nil, 0, &LimitError{What: "model_calls_per_day", Limit: limit, Pointer: pointer + "/budget/calls_per_day",
			Detail: fmt.Sprintf("asks for %v model calls per day but only %d remain of your limit of %d (%s): ask for %d or fewer", asked, remaining, limit, taken, remaining)}
	case asked > 0:
		return def, int(asked), nil
	}
	if budget == nil {
		budget = map[string]json.RawMessage{}
	}
	allot := min(DefaultWatchCalls, remaining)
	budget["calls_per_day"] = json.RawMessage(strconv.Itoa(allot))
	b, err := json.Marshal(budget)
	if err != nil {
		return nil, 0, err
	}
	w["budget"] = b
	out, err := json.Marshal(w)
	return out, allot, err
}
