package control

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DefaultWatchCalls is the budget.calls_per_day an API watch with an ask
// gets when it names none (within what remains of the owner's allowance).
const DefaultWatchCalls = 100

// allotModelCalls keeps an owner's model calls within model_calls_per_day
// through the per-watch budgets the evaluators already enforce across
// replicas: every watch of p with an ask carries budget.calls_per_day, and
// those budgets add up to at most the limit. A watch with an ask and no
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
	var w map[string]any
	if err := json.Unmarshal(def, &w); err != nil {
		return def, 0, nil // the validation path reports it
	}
	if ask, _ := w["ask"].(string); ask == "" {
		return def, 0, nil
	}
	var used int
	if err := tx.QueryRow(ctx, `
		SELECT coalesce(sum((definition->'budget'->>'calls_per_day')::int), 0) FROM watches
		WHERE owner = $1 AND coalesce(definition->>'ask', '') <> '' AND NOT (source = $2 AND name = $3)`,
		p.Owner, source, name).Scan(&used); err != nil {
		return nil, 0, fmt.Errorf("model call allowance of %s: %w", p.Owner, err)
	}
	used += pending
	remaining := limit - used
	budget, _ := w["budget"].(map[string]any)
	asked, _ := budget["calls_per_day"].(float64)
	switch {
	case remaining <= 0:
		return nil, 0, &LimitError{What: "model_calls_per_day", Limit: limit, Pointer: pointer + "/ask",
			Detail: fmt.Sprintf("your watches with an ask already have budgets of %d model calls per day, your limit: lower the budget.calls_per_day of one, delete one, or drop this watch's ask", used)}
	case asked > float64(remaining):
		return nil, 0, &LimitError{What: "model_calls_per_day", Limit: limit, Pointer: pointer + "/budget/calls_per_day",
			Detail: fmt.Sprintf("asks for %v model calls per day but only %d remain of your limit of %d (your other watches' budgets take %d): ask for %d or fewer", asked, remaining, limit, used, remaining)}
	case asked > 0:
		return def, int(asked), nil
	}
	if budget == nil {
		budget = map[string]any{}
	}
	allot := min(DefaultWatchCalls, remaining)
	budget["calls_per_day"] = allot
	w["budget"] = budget
	out, err := json.Marshal(w)
	return out, allot, err
}
