// Package watchdog raises alerts about lookout itself: sources that went
// stale (no successful run within their window), runs that are stuck (their
// lease expired, or they run past sources.stuck_after_seconds), sources the
// system disabled, webhook sources whose deliveries stopped arriving while
// their reconciliation polls still repair changes, and notifications that
// became dead letters — the quiet
// failures of background work that nobody notices until it matters.
//
// The stale check covers the live set of sources of the definitions: the
// evaluator hands the watchdog every change of the definitions it follows
// (Apply), so a source created through the API, or added to the
// configuration directory and reloaded, is checked from the next check on,
// and a removed one is not checked any more.
//
// The watchdog runs in the evaluator daemon. Every alerts.interval one
// replica at a time (a transaction-scoped advisory lock, per schema) looks
// for problems and writes each as a notifications row of kind 'alert' for
// every alert sink, in one transaction: delivery, retries, dead letters
// and the sinks are the outbox's. Every alert has a dedupe key naming the
// problem instance (alert/stale/<source>/<since>, alert/stuck/<source>/run-<id>,
// ...), so a problem alerts once however many checks see it, and alerts
// again only when it is a new instance (the source recovered, then went
// stale again).
//
// Dead letters are marked (notifications.dead_alerted_at) in the
// transaction that raises their alert. Alerts are never alerted about: an
// alert to a sink that is down dies like any notification, and raises
// nothing, so a dead sink cannot feed a loop; and an alert about a sink's
// dead letters goes to the other alert sinks when there are any.
package watchdog

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/service"
)

// Kinds of alert (the payload's alert.type, the metric's kind label).
const (
	KindStale       = "stale"
	KindStuck       = "stuck"
	KindDeadLetters = "dead_letters"
	KindDisabled    = "disabled"
	// KindWebhookSilent: a webhook source received no event for longer
	// than its webhook.silence_alert while its reconciliation polls
	// still found changes (the deliveries are not arriving).
	KindWebhookSilent = "webhook_silent"
	// KindLate: the sources' p99 lateness passed alerts.late_after.
	KindLate = "late"
)

// Source is the notifications.source of alerts that are about no source
// (dead letters).
const Source = "_lookout"

// WatchPrefix starts the notifications.watch of alerts: _alert_<kind>.
const WatchPrefix = "_alert_"

// lockKey is the first key of the watchdog's advisory lock; the second is
// the hash of the schema, so that installations (and tests) in separate
// schemas of one database do not exclude each other.
const lockKey = 0x6c6f6f6b // "look"

// Config are the watchdog's typed settings. New uses them as given; the
// defaults below are the ones the config loader applies to lookout.yaml's
// alerts block, and FromConfig carries its values over.
type Config struct {
	// Sources are the sources checked for staleness until the first Apply
	// of a full load of the definitions replaces them (a daemon that
	// follows the definitions leaves it empty). Defaults to none.
	Sources []*config.Source
	// Enabled turns the checks on (alerts.enabled). Defaults to true when
	// Notify names a sink.
	Enabled bool
	// Notify lists the sinks alerts go to (alerts.notify). Defaults to
	// defaults.notify.
	Notify []string
	// Interval between checks (alerts.interval). Defaults to 1m.
	Interval time.Duration
	// StaleAfter is how long any source may go without a successful run
	// before it is stale, unless the source sets its own
	// (alerts.stale_after). Defaults to three times each source's longest
	// interval, and at least 5m.
	StaleAfter time.Duration
	// LateAfter raises a late alert when the p99 lateness of the active
	// sources passes it (alerts.late_after); <= 0 turns the check off.
	// Defaults to 0 here; the config loader's default is 1m.
	LateAfter time.Duration
	// OnAlert, when set, is called after a check that wrote alert
	// notifications, with their number (the delivery wake-up).
	OnAlert func(notifications int)
	// Metrics counts the alerts raised. Defaults to nil: nothing recorded.
	Metrics *metrics.Metrics
	// Now is the clock of cron stale windows. Defaults to time.Now.
	Now func() time.Time
}

// FromConfig returns the watchdog settings of a loaded configuration
// directory: its sources and lookout.yaml's alerts block, with the
// defaults the loader applied. OnAlert, Metrics and Now are left for the
// caller.
func FromConfig(cfg *config.Config) Config {
	a := &cfg.Global.Alerts
	return Config{Sources: cfg.Sources, Enabled: a.On(), Notify: a.Notify, Interval: a.Interval, StaleAfter: a.StaleAfter,
		LateAfter: a.LateAfter}
}

// Watchdog checks for problems and raises alerts.
type Watchdog struct {
	pool   *pgxpool.Pool
	conf   Config
	logger *slog.Logger
	loop   service.Loop

	// cov is the set of sources the stale check covers.
	cov coverage
}

// New returns a watchdog for the sources and alert settings of conf.
func New(pool *pgxpool.Pool, conf Config, logger *slog.Logger) *Watchdog {
	if conf.Now == nil {
		conf.Now = time.Now
	}
	w := &Watchdog{pool: pool, conf: conf, logger: logger.With("component", "watchdog")}
	w.cov.init(conf.Sources, conf.StaleAfter)
	return w
}

// Apply makes the stale check cover the sources of the definitions as of
// d: a full load replaces the sources it covered, a delta adds or
// replaces the sources it carries and drops the removed ones. Paused
// definitions are not covered. A definition that did not parse
// (d.Invalid) keeps what the watchdog had for it. It has the signature of
// a definitions.Follower's consumer and never fails.
func (w *Watchdog) Apply(_ context.Context, d *definitions.Delta) error {
	w.cov.apply(d)
	return nil
}

// Covered returns the names of the sources the stale check covers, sorted.
func (w *Watchdog) Covered() []string { return w.cov.names() }

// Start checks now and then every interval in the background, until Stop.
// With alerts.enabled false it does nothing.
func (w *Watchdog) Start(ctx context.Context) error {
	switch {
	case !w.conf.Enabled && len(w.conf.Notify) == 0:
		w.logger.Warn("alerts disabled: no sink to send them to (set alerts.notify, or defaults.notify)")
		return nil
	case !w.conf.Enabled:
		w.logger.Info("alerts disabled (alerts.enabled: false)")
		return nil
	}
	return w.loop.Start(ctx, w.run)
}

// Stop stops the watchdog and waits for a check in progress.
func (w *Watchdog) Stop() error { return w.loop.Stop() }

func (w *Watchdog) run(ctx context.Context) error {
	w.logger.Info("watchdog started", "interval", w.conf.Interval, "notify", w.conf.Notify)
	t := time.NewTicker(w.conf.Interval)
	defer t.Stop()
	backoff := service.LoopBackoff()
	for {
		if _, err := w.Check(ctx); err != nil && ctx.Err() == nil {
			wait := backoff.Next()
			w.logger.Error("check for alerts", "error", err, "retry_in", wait)
			if !service.RetrySleep(ctx, wait) {
				return nil
			}
		} else {
			backoff.Reset()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Alert is one problem found.
type Alert struct {
	Kind string
	// Source, RecordID and Watch are the notifications columns: the source
	// (or "_lookout"), the subject, and "_alert_<kind>".
	Source, RecordID, Watch string
	// Subject is what the alert is about, as the payload says it.
	Subject   string
	DedupeKey string
	Title     string
	Body      string
	Since     time.Time
	Details   map[string]any
	// Sinks the alert is sent to.
	Sinks []string
}

// Result is what one Check did.
type Result struct {
	// Ran is false when another replica was checking (it held the lock).
	Ran bool
	// Raised are the alerts that were new (at least one notification row
	// written); problems already alerted are not listed.
	Raised []Alert
	// Notifications is the number of rows written (alerts times sinks).
	Notifications int
}

// Check looks for problems once and writes an alert notification for each
// new one, in one transaction, unless another replica is checking.
func (w *Watchdog) Check(ctx context.Context) (Result, error) {
	var res Result
	sinks := w.conf.Notify
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		res = Result{}
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema()))`, lockKey).Scan(&res.Ran); err != nil {
			return fmt.Errorf("take the watchdog lock: %w", err)
		}
		if !res.Ran {
			return nil
		}
		var found []Alert
		for _, check := range []func(context.Context, pgx.Tx) ([]Alert, error){w.stale, w.stuck, w.disabled, w.webhookSilent, w.late, w.deadLetters} {
			a, err := check(ctx, tx)
			if err != nil {
				return err
			}
			found = append(found, a...)
		}
		for i := range found {
			if found[i].Sinks == nil {
				found[i].Sinks = sinks
			}
		}
		raised, n, err := insert(ctx, tx, found)
		if err != nil {
			return err
		}
		res.Raised, res.Notifications = raised, n
		if n > 0 {
			return outbox.Wake(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("watchdog check: %w", err)
	}
	for _, a := range res.Raised {
		w.conf.Metrics.Alert(a.Kind)
		w.logger.Warn("alert raised", "kind", a.Kind, "source", a.Source, "subject", a.Subject, "dedupe_key", a.DedupeKey,
			"title", a.Title, "sinks", a.Sinks)
	}
	if res.Notifications > 0 && w.conf.OnAlert != nil {
		w.conf.OnAlert(res.Notifications)
	}
	return res, nil
}

// stamp formats a time for a dedupe key: UTC, microseconds (the database's
// precision), so that every read of one timestamp gives one key.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func ago(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	case d >= time.Hour:
		return d.Truncate(time.Minute).String()
	default:
		return d.Truncate(time.Second).String()
	}
}

// stale finds the covered sources without a successful run within their
// stale window, in one query that returns the candidates only: the
// active sources past the shortest window of the covered ones (the exact
// window of each and whether it is covered are then looked up in Go),
// and the covered definitions that no syncer has registered in the
// sources table, of those past their window whose registration was not
// seen yet (none, once every definition was seen registered). The window
// starts at the last success, or at the registration or the last status
// change (a resume) when later; for a definition not registered, at its
// creation. The registered names are read by one uncorrelated subquery:
// Citus refuses a correlated one beside a set-returning function
// ("correlated subqueries are not supported when the FROM clause contains
// a set returning function").
func (w *Watchdog) stale(ctx context.Context, tx pgx.Tx) ([]Alert, error) {
	now := w.conf.Now()
	shortest, probe, probeDefined, ok := w.cov.plan(now)
	if !ok {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
		SELECT s.name, true, s.last_success_at, s.last_run_at, s.failure_count, coalesce(s.last_error, ''), s.next_run_at,
		       greatest(s.last_success_at, s.status_changed_at, s.created_at),
		       extract(epoch FROM now() - greatest(s.last_success_at, s.status_changed_at, s.created_at))::float8
		FROM sources s
		WHERE s.status = 'active' AND greatest(s.last_success_at, s.status_changed_at, s.created_at) < now() - make_interval(secs => $1)
		UNION ALL
		SELECT c.name, false, NULL, NULL, 0, '', NULL, c.defined, extract(epoch FROM now() - c.defined)::float8
		FROM unnest($2::text[], $3::timestamptz[]) AS c(name, defined)
		WHERE c.name <> ALL (ARRAY(SELECT s.name FROM sources s WHERE s.name = ANY ($2::text[])))
		ORDER BY 1`, shortest.Seconds(), probe, probeDefined)
	if err != nil {
		return nil, fmt.Errorf("look for stale sources: %w", err)
	}
	unregistered := map[string]bool{}
	var registered []string
	var out []Alert
	for rows.Next() {
		var name, lastErr string
		var isRegistered bool
		var lastSuccess, lastRun, next *time.Time
		var failures int
		var since time.Time
		var age float64
		if err := rows.Scan(&name, &isRegistered, &lastSuccess, &lastRun, &failures, &lastErr, &next, &since, &age); err != nil {
			return nil, fmt.Errorf("look for stale sources: %w", err)
		}
		if isRegistered {
			registered = append(registered, name)
		} else {
			unregistered[name] = true
		}
		src, win, covered := w.cov.lookup(name, now)
		if !covered || age*float64(time.Second) <= float64(win) {
			continue
		}
		window := win.Seconds()
		details := map[string]any{"stale_after_seconds": window, "failure_count": failures}
		if next != nil {
			details["next_run_at"] = next.UTC()
		}
		if src.owner != "" {
			details["source_owner"] = src.owner
		}
		if src.managedBy != "" {
			details["managed_by"] = src.managedBy
		}
		var b strings.Builder
		if !isRegistered {
			fmt.Fprintf(&b, "Defined at %s (managed by %s), but no syncer has registered it in the sources table: "+
				"is a syncer running against this database, and does it accept this definition (see its log)?", since.UTC().Format(time.RFC3339), src.managedBy)
			out = append(out, Alert{
				Kind: KindStale, Source: name, RecordID: name, Watch: WatchPrefix + KindStale, Subject: name,
				DedupeKey: "alert/stale/" + name + "/" + stamp(since),
				Title:     fmt.Sprintf("[lookout] source %s is stale: never run in the %s since it was defined (stale_after %s)", name, ago(time.Duration(age*float64(time.Second))), win),
				Body:      b.String(), Since: since, Details: details,
			})
			continue
		}
		if lastSuccess != nil {
			details["last_success_at"] = lastSuccess.UTC()
			fmt.Fprintf(&b, "Last successful run: %s.\n", lastSuccess.UTC().Format(time.RFC3339))
		} else {
			fmt.Fprintf(&b, "No successful run since it was registered or resumed (%s).\n", since.UTC().Format(time.RFC3339))
		}
		if lastRun != nil {
			details["last_run_at"] = lastRun.UTC()
			fmt.Fprintf(&b, "Last run: %s; consecutive failures: %d.\n", lastRun.UTC().Format(time.RFC3339), failures)
		} else {
			b.WriteString("It never ran: is a syncer running against this database?\n")
		}
		if lastErr != "" {
			details["last_error"] = lastErr
			fmt.Fprintf(&b, "Last error: %s\n", lastErr)
		}
		if src.owner != "" {
			fmt.Fprintf(&b, "Source of %s (managed by %s).\n", src.owner, src.managedBy)
		}
		fmt.Fprintf(&b, "Next run due: %s. See `syncer status`.", next.UTC().Format(time.RFC3339))
		out = append(out, Alert{
			Kind: KindStale, Source: name, RecordID: name, Watch: WatchPrefix + KindStale, Subject: name,
			DedupeKey: "alert/stale/" + name + "/" + stamp(since),
			Title:     fmt.Sprintf("[lookout] source %s is stale: no successful run for %s (stale_after %s)", name, ago(time.Duration(age*float64(time.Second))), win),
			Body:      b.String(), Since: since, Details: details,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look for stale sources: %w", err)
	}
	// The probed definitions that are not unregistered are registered.
	for _, name := range probe {
		if !unregistered[name] {
			registered = append(registered, name)
		}
	}
	w.cov.seen(registered)
	return out, nil
}

// stuck finds the stuck runs: the view stuck_runs, the one definition
// report_stuck (the admin page, the report command) reads too — running
// runs whose source lease is gone (expired, released, or held for another
// run) or that run past the source's stuck_after_seconds.
func (w *Watchdog) stuck(ctx context.Context, tx pgx.Tx) ([]Alert, error) {
	rows, err := tx.Query(ctx, `
		SELECT id, source, owner, started_at, lease_owner, lease_expires_at, stuck_after_seconds, lease_gone, running_seconds
		FROM stuck_runs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("look for stuck runs: %w", err)
	}
	var out []Alert
	for rows.Next() {
		var id int64
		var source, owner, leaseOwner string
		var started time.Time
		var leaseEnd *time.Time
		var stuckAfter int
		var leaseGone bool
		var age float64
		if err := rows.Scan(&id, &source, &owner, &started, &leaseOwner, &leaseEnd, &stuckAfter, &leaseGone, &age); err != nil {
			return nil, fmt.Errorf("look for stuck runs: %w", err)
		}
		running := time.Duration(age * float64(time.Second))
		details := map[string]any{"run_id": id, "owner": owner, "started_at": started.UTC(), "running_seconds": age,
			"stuck_after_seconds": stuckAfter, "lease_owner": leaseOwner}
		why := fmt.Sprintf("running for %s, past stuck_after_seconds (%d)", ago(running), stuckAfter)
		if leaseGone {
			switch {
			case leaseEnd != nil && leaseOwner == owner:
				why = fmt.Sprintf("its lease expired at %s (owner %s)", leaseEnd.UTC().Format(time.RFC3339), owner)
				details["lease_expires_at"] = leaseEnd.UTC()
			default:
				why = fmt.Sprintf("its source's lease is no longer held for it (owner %s)", owner)
			}
		}
		subject := source + "/run-" + strconv.FormatInt(id, 10)
		body := fmt.Sprintf("sync_runs %d of source %s, started %s by %s, is still 'running': %s.\n"+
			"The syncer that runs it may have died or hung. Another syncer takes the source over when it is next due "+
			"(the run is then recorded as abandoned). See `syncer status` and the report of stuck runs.",
			id, source, started.UTC().Format(time.RFC3339), owner, why)
		out = append(out, Alert{
			Kind: KindStuck, Source: source, RecordID: "run-" + strconv.FormatInt(id, 10), Watch: WatchPrefix + KindStuck, Subject: subject,
			DedupeKey: "alert/stuck/" + subject,
			Title:     fmt.Sprintf("[lookout] run %d of source %s is stuck: %s", id, source, why),
			Body:      body, Since: started, Details: details,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look for stuck runs: %w", err)
	}
	return out, nil
}

// disabled finds sources the system (or an operator) disabled.
func (w *Watchdog) disabled(ctx context.Context, tx pgx.Tx) ([]Alert, error) {
	rows, err := tx.Query(ctx, `
		SELECT name, coalesce(status_reason, ''), coalesce(status_changed_at, updated_at), failure_count, coalesce(last_error, '')
		FROM sources WHERE status = 'disabled' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("look for disabled sources: %w", err)
	}
	var out []Alert
	for rows.Next() {
		var name, reason, lastErr string
		var since time.Time
		var failures int
		if err := rows.Scan(&name, &reason, &since, &failures, &lastErr); err != nil {
			return nil, fmt.Errorf("look for disabled sources: %w", err)
		}
		details := map[string]any{"reason": reason, "failure_count": failures}
		if lastErr != "" {
			details["last_error"] = lastErr
		}
		out = append(out, Alert{
			Kind: KindDisabled, Source: name, RecordID: name, Watch: WatchPrefix + KindDisabled, Subject: name,
			DedupeKey: "alert/disabled/" + name + "/" + stamp(since),
			Title:     fmt.Sprintf("[lookout] source %s was disabled: %s", name, reason),
			Body: fmt.Sprintf("Source %s is disabled since %s and is not polled any more.\nReason: %s\n"+
				"Fix the cause (credentials, configuration), then `syncer resume %s`.", name, since.UTC().Format(time.RFC3339), reason, name),
			Since: since, Details: details,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look for disabled sources: %w", err)
	}
	return out, nil
}

// webhookSilent finds active webhook sources that received no valid
// event for longer than their silence_alert_seconds while the
// reconciliation polls since their last event repaired changes: the
// provider stopped delivering (a webhook deleted or disabled upstream, a
// changed secret, an unreachable endpoint) and the source lives on its
// slow poll.
func (w *Watchdog) webhookSilent(ctx context.Context, tx pgx.Tx) ([]Alert, error) {
	rows, err := tx.Query(ctx, `
		SELECT s.name, s.webhook, s.silence_alert_seconds, l.last_event_at, coalesce(l.last_event_at, s.created_at) AS since,
		       extract(epoch FROM now() - coalesce(l.last_event_at, s.created_at))::float8,
		       r.repaired, r.runs, r.last_repair_at, coalesce(j.rejected, 0)
		FROM sources s
		LEFT JOIN LATERAL (SELECT max(received_at) AS last_event_at FROM inbound_events
		                   WHERE source = s.name AND signature_valid) l ON true
		CROSS JOIN LATERAL (SELECT coalesce(sum(repaired), 0)::bigint AS repaired, count(*) FILTER (WHERE repaired > 0) AS runs,
		                           max(started_at) FILTER (WHERE repaired > 0) AS last_repair_at
		                    FROM sync_runs WHERE source = s.name AND started_at > coalesce(l.last_event_at, s.created_at)) r
		LEFT JOIN LATERAL (SELECT count(*) AS rejected FROM inbound_events
		                   WHERE source = s.name AND NOT signature_valid AND received_at > coalesce(l.last_event_at, s.created_at)) j ON true
		WHERE s.status = 'active' AND s.webhook IS NOT NULL AND s.silence_alert_seconds > 0
		  AND coalesce(l.last_event_at, s.created_at) < now() - make_interval(secs => s.silence_alert_seconds)
		  AND r.repaired > 0
		ORDER BY s.name`)
	if err != nil {
		return nil, fmt.Errorf("look for silent webhook sources: %w", err)
	}
	var out []Alert
	for rows.Next() {
		var name, provider string
		var window int
		var last *time.Time
		var since, lastRepair time.Time
		var age float64
		var repaired, runs, rejected int64
		if err := rows.Scan(&name, &provider, &window, &last, &since, &age, &repaired, &runs, &lastRepair, &rejected); err != nil {
			return nil, fmt.Errorf("look for silent webhook sources: %w", err)
		}
		silence := time.Duration(age * float64(time.Second))
		win := time.Duration(window) * time.Second
		details := map[string]any{"provider": provider, "silence_alert_seconds": window, "repaired": repaired,
			"repairing_runs": runs, "last_repair_at": lastRepair.UTC(), "rejected": rejected}
		var b strings.Builder
		if last != nil {
			details["last_event_at"] = last.UTC()
			fmt.Fprintf(&b, "Source %s received its last webhook event at %s, %s ago (silence_alert %s).\n", name, last.UTC().Format(time.RFC3339), ago(silence), win)
		} else {
			fmt.Fprintf(&b, "Source %s has received no webhook event since it was registered (%s, %s ago; silence_alert %s).\n", name, since.UTC().Format(time.RFC3339), ago(silence), win)
		}
		fmt.Fprintf(&b, "Since then its reconciliation polls repaired %d change(s) in %d run(s), the last at %s: the source changes, but its deliveries do not arrive.\n",
			repaired, runs, lastRepair.UTC().Format(time.RFC3339))
		if rejected > 0 {
			fmt.Fprintf(&b, "%d delivery(ies) were rejected for their signature in that time: check the webhook secret on both sides.\n", rejected)
		} else {
			b.WriteString("No delivery arrived at all: check the webhook on the provider's side (its URL, its recent deliveries) and that /ingest is reachable.\n")
		}
		b.WriteString("See report_webhook_health (docs/webhooks.md).")
		out = append(out, Alert{
			Kind: KindWebhookSilent, Source: name, RecordID: name, Watch: WatchPrefix + KindWebhookSilent, Subject: name,
			DedupeKey: "alert/webhook_silent/" + name + "/" + stamp(since),
			Title:     fmt.Sprintf("[lookout] webhook source %s is silent: no event for %s while its polls repaired %d change(s)", name, ago(silence), repaired),
			Body:      b.String(), Since: since, Details: details,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look for silent webhook sources: %w", err)
	}
	return out, nil
}

// late raises an alert when the sources run late: the 99th percentile,
// over the active sources, of each one's lateness — the worst start of
// its quiet runs in the last hour (sync_run_hours) or how long it is
// overdue now, whichever is more — passes LateAfter. One alert per hour
// at most while it lasts (the dedupe key names the hour).
func (w *Watchdog) late(ctx context.Context, tx pgx.Tx) ([]Alert, error) {
	if w.conf.LateAfter <= 0 {
		return nil, nil
	}
	var p99, worst float64
	var late, total int
	var worstSource string
	err := tx.QueryRow(ctx, `
		WITH l AS (
		    SELECT s.name,
		           greatest(CASE WHEN (s.lease_owner IS NULL OR s.lease_expires_at < now())
		                              AND least(s.next_run_at, s.run_requested_at) < now()
		                         THEN extract(epoch FROM now() - least(s.next_run_at, s.run_requested_at))::float8 ELSE 0 END,
		                    coalesce((SELECT max(h.lateness_seconds_max) FROM sync_run_hours h
		                              WHERE h.source = s.name AND h.hour > now() - interval '2 hours'
		                                AND h.last_started_at > now() - interval '1 hour'), 0)) AS late
		    FROM sources s WHERE s.status = 'active'
		)
		SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY late), 0), count(*) FILTER (WHERE late > $1), count(*),
		       coalesce(max(late), 0), coalesce((SELECT name FROM l ORDER BY late DESC, name LIMIT 1), '')
		FROM l`, w.conf.LateAfter.Seconds()).Scan(&p99, &late, &total, &worst, &worstSource)
	if err != nil {
		return nil, fmt.Errorf("measure how late sources run: %w", err)
	}
	if p99 <= w.conf.LateAfter.Seconds() {
		return nil, nil
	}
	now := w.conf.Now().UTC()
	hour := now.Truncate(time.Hour)
	p := time.Duration(p99 * float64(time.Second)).Round(time.Second)
	body := fmt.Sprintf("The 99th percentile of how late the active sources run is %s, past alerts.late_after (%s): "+
		"%d of %d sources ran, or are overdue, later than that; the latest is %s (%s).\n"+
		"The syncers do not keep up: too few replicas, slots (syncer.concurrency) or CPU, a slow database, or no syncer running. "+
		"See lookout_schedule_lateness_seconds, the syncers' summary lines, report_active_sources (overdue, lateness_max_1h) and docs/scaling.md.",
		p, w.conf.LateAfter, late, total, worstSource, time.Duration(worst*float64(time.Second)).Round(time.Second))
	return []Alert{{
		Kind: KindLate, Source: Source, RecordID: "schedule", Watch: WatchPrefix + KindLate, Subject: "schedule",
		DedupeKey: "alert/late/" + hour.Format("2006-01-02T15Z"),
		Title:     fmt.Sprintf("[lookout] sources run late: p99 lateness %s (late_after %s)", p, w.conf.LateAfter),
		Body:      body, Since: hour,
		Details: map[string]any{"p99_seconds": p99, "late_after_seconds": w.conf.LateAfter.Seconds(), "late_sources": late,
			"active_sources": total, "latest_source": worstSource, "latest_seconds": worst},
	}}, nil
}

// maxExamples bounds the dead letters a dead-letter alert lists.
const maxExamples = 5

// deadLetters marks the dead letters not yet alerted and returns one alert
// per sink. Alert rows are never counted.
func (w *Watchdog) deadLetters(ctx context.Context, tx pgx.Tx) ([]Alert, error) {
	dead, err := outbox.MarkDeadAlerted(ctx, tx, maxExamples)
	if err != nil {
		return nil, fmt.Errorf("look for dead letters: %w", err)
	}
	var out []Alert
	for _, dl := range dead {
		sink, n, first, last, maxID := dl.Sink, dl.Count, dl.First, dl.Last, dl.MaxID
		ids, watches, titles, errs := dl.IDs, dl.Watches, dl.Titles, dl.Errors
		var b strings.Builder
		fmt.Fprintf(&b, "%d notification(s) to sink %s became dead (gave up after their attempts, or failed permanently) between %s and %s.\n",
			n, sink, first.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339))
		for i := range ids {
			fmt.Fprintf(&b, "- #%d %s [%s]: %s\n", ids[i], titles[i], watches[i], errs[i])
		}
		fmt.Fprintf(&b, "See `evaluator deliveries --status dead --sink %s`; after fixing the sink, `evaluator retry-dead --sink %s`.", sink, sink)
		// An alert about a sink's dead letters is not sent to that sink
		// (it is failing), unless no other alert sink is configured.
		sinks := slices.DeleteFunc(slices.Clone(w.conf.Notify), func(s string) bool { return s == sink })
		if len(sinks) == 0 {
			sinks = w.conf.Notify
		}
		out = append(out, Alert{
			Kind: KindDeadLetters, Source: Source, RecordID: sink, Watch: WatchPrefix + KindDeadLetters, Subject: sink,
			DedupeKey: fmt.Sprintf("alert/dead_letters/%s/%d@%s", sink, maxID, stamp(last)),
			Title:     fmt.Sprintf("[lookout] %d notification(s) to sink %s are dead letters", n, sink),
			Body:      b.String(), Since: first, Sinks: sinks,
			Details: map[string]any{"count": n, "first_dead_at": first.UTC(), "last_dead_at": last.UTC(),
				"notification_ids": ids, "last_error": errs[0]},
		})
	}
	return out, nil
}

// insert writes one notification per (alert, sink); a dedupe key already
// there writes nothing. It returns the alerts that wrote at least one row
// and the number of rows.
func insert(ctx context.Context, tx pgx.Tx, alerts []Alert) ([]Alert, int, error) {
	var rows []outbox.Notification
	now := time.Now().UTC()
	for _, a := range alerts {
		since := a.Since.UTC()
		p := notify.Payload{
			DedupeKey: a.DedupeKey, Kind: notify.KindAlert, Watch: a.Watch, Source: a.Source,
			Title: a.Title, Body: a.Body,
			Record:  notify.PayloadRecord{ID: a.RecordID, Title: a.Subject},
			Change:  notify.PayloadChange{ChangedFields: []string{}},
			Urgency: "high", Reason: a.Kind, CreatedAt: now,
			Alert: &notify.PayloadAlert{Type: a.Kind, Subject: a.Subject, Since: &since, Details: a.Details},
		}
		payload := p.Marshal()
		for _, s := range a.Sinks {
			rows = append(rows, outbox.Notification{DedupeKey: a.DedupeKey, Sink: s, Source: a.Source, RecordID: a.RecordID,
				Watch: a.Watch, Kind: outbox.KindAlert, Title: a.Title, Body: a.Body, Urgency: "high", Reason: a.Kind,
				Payload: payload, Status: outbox.StatusPending})
		}
	}
	if len(rows) == 0 {
		return nil, 0, nil
	}
	res, err := outbox.EnqueueNew(ctx, tx, rows)
	if err != nil {
		return nil, 0, fmt.Errorf("write alert notifications: %w", err)
	}
	written := map[string]bool{}
	n := 0
	for i, r := range res {
		if r.Inserted {
			written[rows[i].DedupeKey] = true
			n++
		}
	}
	var raised []Alert
	for _, a := range alerts {
		if written[a.DedupeKey] {
			raised = append(raised, a)
		}
	}
	return raised, n, nil
}
