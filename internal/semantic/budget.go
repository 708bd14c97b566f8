package semantic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
)

// budgets reserves model calls against the daily budgets of watches
// (config.Budget) in the model_budgets table, which this file owns: one
// row per (source, watch, UTC day). A call is reserved with one atomic
// UPDATE before it is made, so calls_per_day is a cap shared by every
// worker and every evaluator; tokens are counted after each call, so
// tokens_per_day stops new calls once reached (the calls in flight may
// pass it by their own tokens). A nil *budgets reserves nothing (replay).
type budgets struct {
	pool *pgxpool.Pool
	// now is the calendar of the days (modelspec.Config.Now).
	now func() time.Time
}

// exhaustedError says which limit stopped a call: a budget, or the call
// limit of a replay.
type exhaustedError struct{ msg string }

func (e *exhaustedError) Error() string { return e.msg }

// reservation is one model call reserved against a watch's budget; nil
// when no budget applies.
type reservation struct {
	pool          *pgxpool.Pool
	source, watch string
	day           time.Time
}

// reserveSQL takes one call of today's budget ($5, the UTC day of the
// client's calendar) when one is left.
const reserveSQL = `
	UPDATE model_budgets SET calls = calls + 1, updated_at = now()
	WHERE source = $1 AND watch = $2 AND day = $5::date
	  AND ($3::int = 0 OR calls < $3) AND ($4::bigint = 0 OR tokens < $4)
	RETURNING day`

// seedSQL creates today's row ($3, the UTC day) of a watch, counting the
// calls it made that day before it had one (a budget added during the day).
const seedSQL = `
	INSERT INTO model_budgets (source, watch, day, calls, tokens)
	SELECT $1, $2, d.day, count(mc.id), coalesce(sum(mc.prompt_tokens + mc.output_tokens), 0)
	FROM (SELECT $3::date AS day) AS d
	LEFT JOIN model_calls mc ON mc.source = $1 AND mc.watch = $2 AND mc.purpose IN ('evaluate', 'briefing')
	     AND mc.created_at >= d.day::timestamp AT TIME ZONE 'UTC'
	GROUP BY d.day
	ON CONFLICT (source, watch, day) DO NOTHING`

// reserve reserves one call of the budget bud of source's watch (its
// verdicts and its digest's briefings share it). It returns an
// *exhaustedError naming the limit reached, or a database error.
func (b *budgets) reserve(ctx context.Context, source, watch string, bud config.Budget) (*reservation, error) {
	if b == nil || (bud.CallsPerDay == 0 && bud.TokensPerDay == 0) {
		return nil, nil
	}
	r := struct {
		Source, Watch string
		Budget        config.Budget
	}{source, watch, bud}
	today := b.now().UTC()
	today = time.Date(today.Year(), today.Month(), today.Day(), 0, 0, 0, 0, time.UTC)
	for range 2 {
		var day time.Time
		err := b.pool.QueryRow(ctx, reserveSQL, r.Source, r.Watch, r.Budget.CallsPerDay, int64(r.Budget.TokensPerDay), today).Scan(&day)
		if err == nil {
			return &reservation{pool: b.pool, source: r.Source, watch: r.Watch, day: day}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("reserve a model call of %s/%s's budget: %w", r.Source, r.Watch, err)
		}
		var calls, tokens int64
		err = b.pool.QueryRow(ctx, `
			SELECT calls, tokens FROM model_budgets
			WHERE source = $1 AND watch = $2 AND day = $3::date`, r.Source, r.Watch, today).Scan(&calls, &tokens)
		switch {
		case err == nil:
			if r.Budget.CallsPerDay > 0 && calls >= int64(r.Budget.CallsPerDay) {
				return nil, &exhaustedError{fmt.Sprintf("budget exhausted: %d of calls_per_day %d used", calls, r.Budget.CallsPerDay)}
			}
			if r.Budget.TokensPerDay > 0 && tokens >= int64(r.Budget.TokensPerDay) {
				return nil, &exhaustedError{fmt.Sprintf("budget exhausted: %d of tokens_per_day %d used", tokens, r.Budget.TokensPerDay)}
			}
			// A call was given back meanwhile: try again.
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := b.pool.Exec(ctx, seedSQL, r.Source, r.Watch, today); err != nil {
				return nil, fmt.Errorf("start today's model budget of %s/%s: %w", r.Source, r.Watch, err)
			}
		default:
			return nil, fmt.Errorf("read the model budget of %s/%s: %w", r.Source, r.Watch, err)
		}
	}
	// Reserved and given back in between: the budget is contended; the change waits like one whose model failed.
	return nil, fmt.Errorf("reserve a model call of %s/%s's budget: contended, try later", r.Source, r.Watch)
}

// release gives back a reserved call that was not made (nil: nothing).
func (v *reservation) release(ctx context.Context, logger *slog.Logger) {
	if v == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := v.pool.Exec(ctx, `
		UPDATE model_budgets SET calls = calls - 1, updated_at = now()
		WHERE source = $1 AND watch = $2 AND day = $3 AND calls > 0`, v.source, v.watch, v.day); err != nil {
		logger.Warn("give back an unused model call to the budget", "source", v.source, "watch", v.watch, "error", err)
	}
}

// addTokens counts the tokens of the reserved call (nil: nothing).
func (v *reservation) addTokens(ctx context.Context, n int, logger *slog.Logger) {
	if v == nil || n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := v.pool.Exec(ctx, `
		UPDATE model_budgets SET tokens = tokens + $4, updated_at = now()
		WHERE source = $1 AND watch = $2 AND day = $3`, v.source, v.watch, v.day, n); err != nil {
		logger.Warn("count model tokens against the budget", "source", v.source, "watch", v.watch, "error", err)
	}
}
