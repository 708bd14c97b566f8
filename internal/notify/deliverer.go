package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/egress"
	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/redact"
	"github.com/lookout-dev/lookout/internal/service"
)

// DelivererConfig are the deliverer's typed settings. NewDeliverer uses
// them as given; the defaults below are the ones the config loader applies
// to lookout.yaml's delivery block, and DelivererConfigFrom carries its
// values over.
type DelivererConfig struct {
	// Sinks are lookout.yaml's sinks: each one's timeout, max_attempts and
	// concurrency. A sink without an entry here is not delivered to.
	// Defaults to none.
	Sinks map[string]*config.Sink
	// Owner identifies this replica in leases. Defaults to hostname:pid.
	Owner string
	// Lease bounds how long a claimed notification stays with this
	// replica (delivery.lease). Defaults to 2m.
	Lease time.Duration
	// BatchSize is how many notifications of one sink are claimed at once
	// (delivery.batch_size) until the lane has shown its pace; a lane that
	// sends faster claims more, up to maxClaimFactor times as many
	// (claimSize). Defaults to 100.
	BatchSize int
	// PollInterval is the slow timer for retries that come due
	// (delivery.poll_interval). Defaults to 1s.
	PollInterval time.Duration
	// RetryMin and RetryMax bound the backoff between attempts
	// (delivery.retry_min, delivery.retry_max). Default to 1s and 1h.
	RetryMin, RetryMax time.Duration
	// Metrics counts delivery attempts and expired leases taken over.
	// Defaults to nil: nothing is recorded.
	Metrics *metrics.Metrics
	// Redactor hides configured secrets that a sink echoes in its errors,
	// before they are stored (notifications.last_error) or logged: the
	// configuration's (config.Global.Redactor). Defaults to nil: nothing
	// is redacted.
	Redactor *redact.Redactor
}

// maxRetryAfter caps a receiver's Retry-After.
const maxRetryAfter = 24 * time.Hour

// Deliverer sends due notifications to their sinks. Every sink has a lane
// of its own — its own claim query, its own workers (the sink's
// concurrency) — so a slow or failing sink never holds up another's.
//
// A lane claims a batch of its due rows with FOR UPDATE SKIP LOCKED and a
// lease (attempts is counted at the claim), hands them to its workers, and
// records outcomes in batches: delivered, retried later (exponential
// backoff with jitter, or the receiver's Retry-After), or dead after the
// sink's max_attempts or a permanent failure. A replica that dies between
// sending and recording leaves the row leased; when the lease expires
// another replica sends it again with the same dedupe key.
//
// A lane that many users share (watches' own webhooks) is fair across
// them: it claims with outbox.ClaimFair, at most OwnWebhookPerOwner rows
// of one owner in flight, every owner's oldest first.
type Deliverer struct {
	pool     *pgxpool.Pool
	lanes    []*lane
	conf     DelivererConfig
	logger   *slog.Logger
	wake     chan struct{}
	listener *db.Listener
	loop     service.Loop
	// maxUnrecorded replaces the lanes' send slots (tests); 0 leaves
	// unrecorded's default.
	maxUnrecorded int
	// onClaim, when set, is told each claim's limit and the rows it got
	// (tests).
	onClaim func(asked, got int)
	// span replaces claimSpan (tests: a span of hours makes any pace grow
	// the claims); 0 leaves claimSpan.
	span time.Duration
}

// lane is one sink's queue.
type lane struct {
	name string
	sink Sink
	cfg  *config.Sink
	wake chan struct{}
	// perOwner, when not 0, makes the lane fair across the users it
	// serves (a SharedSink): at most perOwner rows of one owner in flight
	// (outbox.ClaimFair).
	perOwner int
	// stored is set when the sink sends only the payload's bytes (a
	// bodyOnlySink): the claim does not decode the stored text for it.
	stored bool
}

// SharedSink is a sink many users share (watches' own webhooks, their own
// channels), whose lane is fair across them: the lane claims at most
// PerOwner() rows of one owner (the user of the
// watch) at a time, so one user's slow or hanging receiver holds at most
// that many of the lane's workers and never a whole claim batch.
type SharedSink interface {
	Sink
	PerOwner() int
}

// DelivererConfigFrom returns the deliverer settings of lookout.yaml's
// sinks and delivery block, with the defaults the config loader applied.
// Owner and Metrics are left for the caller.
func DelivererConfigFrom(g *config.Global) DelivererConfig {
	dl := g.Delivery
	return DelivererConfig{Sinks: g.Sinks, Lease: dl.Lease, BatchSize: dl.BatchSize,
		PollInterval: dl.PollInterval, RetryMin: dl.RetryMin, RetryMax: dl.RetryMax, Redactor: g.Redactor()}
}

// NewDeliverer returns a deliverer for the given sinks; sinks without an
// entry in conf.Sinks are ignored.
func NewDeliverer(p *pgxpool.Pool, sinks map[string]Sink, conf DelivererConfig, logger *slog.Logger) *Deliverer {
	if conf.Owner == "" {
		host, _ := os.Hostname()
		conf.Owner = fmt.Sprintf("%s:%d", cmp.Or(host, "deliverer"), os.Getpid())
	}
	d := &Deliverer{pool: p, conf: conf, logger: logger.With("component", "deliverer"), wake: make(chan struct{}, 1)}
	names := make([]string, 0, len(sinks))
	for name := range sinks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sc := conf.Sinks[name]
		if sc == nil {
			continue
		}
		l := &lane{name: name, sink: sinks[name], cfg: sc, wake: make(chan struct{}, 1)}
		if s, ok := l.sink.(SharedSink); ok {
			l.perOwner = max(s.PerOwner(), 1)
		}
		_, l.stored = l.sink.(bodyOnlySink)
		d.lanes = append(d.lanes, l)
		conf.Metrics.InitSink(name)
	}
	return d
}

// Listening reports whether the LISTEN connection on the outbox channel is
// up (for readiness); false before Start.
func (d *Deliverer) Listening() bool { return d.listener != nil && d.listener.Connected() }

// Wake asks the deliverer to look for due notifications now.
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Start delivers in the background until Stop.
func (d *Deliverer) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, d.pool)
	if err != nil {
		return err
	}
	d.listener = db.NewListener(d.pool, outbox.Channel(schema), d.logger)
	if err := d.listener.Start(ctx); err != nil {
		return err
	}
	return d.loop.Start(ctx, d.run)
}

// Stop stops claiming, lets deliveries in progress finish within their
// timeout, records their outcomes, and returns.
func (d *Deliverer) Stop() error {
	err := d.loop.Stop()
	if d.listener != nil {
		err = errors.Join(err, d.listener.Stop())
	}
	return err
}

func (d *Deliverer) run(ctx context.Context) error {
	d.logger.Info("deliverer started", "owner", d.conf.Owner, "sinks", len(d.lanes))
	var wg sync.WaitGroup
	for _, l := range d.lanes {
		wg.Go(func() { _, _ = d.runLane(ctx, l, false) })
	}
	t := time.NewTicker(d.conf.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-d.wake:
		case <-d.listener.Wake():
		case <-t.C:
		}
		for _, l := range d.lanes {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
	}
}

// DeliverDue delivers the notifications due now, sink by sink in parallel,
// until none is due, and returns how many deliveries it attempted.
func (d *Deliverer) DeliverDue(ctx context.Context) (int, error) {
	var total atomic.Int64
	errs := make([]error, len(d.lanes))
	var wg sync.WaitGroup
	for i, l := range d.lanes {
		wg.Go(func() {
			n, err := d.runLane(ctx, l, true)
			total.Add(int64(n))
			errs[i] = err
		})
	}
	wg.Wait()
	return int(total.Load()), errors.Join(errs...)
}

// runLane claims and delivers the rows of one sink. With drain it returns
// when a claim finds nothing due; otherwise it waits for a wake-up and
// runs until ctx ends. Outcomes of deliveries that finished are recorded
// before it returns.
//
// A fair lane (perOwner) claims no more rows than it has workers, so that
// a user whose rows come due finds a worker at the next claim rather than
// behind a long batch, and claims again whenever outcomes are recorded:
// that is what moves an owner's window on. An empty claim does not end a
// drain while rows it claimed are unrecorded, since their owners may have
// more rows due.
//
// A lane that is not fair claims its next batches (claimsAhead) while it
// hands out the current one (prefetch) whenever the current batch was full, so that its
// workers do not wait for a claim's round trip between batches. The
// prefetched rows are leased from their claim on; a row whose lease can no
// longer cover an attempt when its turn comes goes back unsent, as any
// other (leaseCovers).
//
// Sending stops while outcomes cannot be recorded: a row sent then would
// be sent again after its lease. Each send takes one of the lane's send
// slots (twice its current claim, claimSize, or twice the concurrency if
// more) that only the recording of its outcome gives back, so at most that
// many rows are ever sent and not yet recorded — what a crash or a
// database outage can repeat; twice, so that sends go on at full speed
// while a write of outcomes is in flight. Once a write fails, no
// new send starts (the check is made before each one) until a write
// succeeds; the rows not sent go back to pending then, without counting
// an attempt.
func (d *Deliverer) runLane(ctx context.Context, l *lane, drain bool) (int, error) {
	logger := d.logger.With("sink", l.name)
	concurrency := max(l.cfg.Concurrency, 1)
	base := max(d.conf.BatchSize, 1)
	span := cmp.Or(d.span, claimSpan)
	size, most := base, base // the next claim's size (claimSize) and its largest; a fair lane's claims are ClaimFair's
	if l.perOwner == 0 {
		most = maxClaimFactor * base
	}
	rec := newRecorder(ctx, d, logger, d.unrecorded(concurrency, size), d.unrecorded(concurrency, most)+(claimsAhead+1)*most)
	var recorded <-chan struct{} // nil (never ready) unless the lane is fair
	if l.perOwner > 0 {
		recorded = rec.recorded
	}
	work := make(chan *claimedRow)
	var workers sync.WaitGroup
	for range concurrency {
		workers.Go(func() {
			for c := range work {
				// Checked again here, where the attempt starts: waiting for
				// a free worker may have eaten the margin checked at claim,
				// and recording may have failed meanwhile.
				if ctx.Err() != nil || rec.failing.Load() || !d.leaseCovers(l, c) {
					rec.add(outcome{id: c.n.ID, created: c.n.CreatedAt, kind: outcomeUnclaim})
					continue
				}
				rec.acquire()
				if ctx.Err() != nil || rec.failing.Load() || !d.leaseCovers(l, c) {
					rec.release()
					rec.add(outcome{id: c.n.ID, created: c.n.CreatedAt, kind: outcomeUnclaim})
					continue
				}
				o := d.attempt(ctx, l, c, logger)
				o.sent = true
				rec.add(o)
			}
		})
	}
	// ahead are the claims of the next batches under way while the
	// current one is handed out, oldest first.
	var ahead []<-chan claimResult
	// dropAhead gives the rows of the claims under way back unsent.
	dropAhead := func() {
		for _, ch := range ahead {
			got := <-ch
			for _, r := range got.batch {
				rec.add(outcome{id: r.n.ID, created: r.n.CreatedAt, kind: outcomeUnclaim})
			}
		}
		ahead = nil
	}
	attempted := 0
	progress := 0 // attempted when a drain last found nothing due (fair lanes)
	var err error
	backoff := service.Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second}
claim:
	for ctx.Err() == nil {
		if rec.failing.Load() {
			dropAhead()
			if drain {
				err = errors.New("stopped sending: delivery outcomes cannot be recorded")
				break
			}
			select {
			case <-ctx.Done():
			case <-rec.recovered:
			}
			continue
		}
		sentBefore := rec.sent.Load()
		var batch []*claimedRow
		var cerr error
		asked := size
		if len(ahead) > 0 {
			got := <-ahead[0]
			ahead = ahead[1:]
			batch, cerr, asked = got.batch, got.err, got.asked
		} else {
			batch, cerr = d.claim(ctx, l, size)
		}
		if cerr != nil {
			if ctx.Err() != nil {
				break
			}
			if drain {
				err = cerr
				break
			}
			wait := backoff.Next()
			logger.Error("claim notifications", "error", cerr, "retry_in", wait)
			if !service.RetrySleep(ctx, wait) {
				break
			}
			continue
		}
		backoff.Reset()
		if d.onClaim != nil {
			d.onClaim(asked, len(batch))
		}
		if len(batch) == 0 && len(ahead) > 0 {
			// Claims made at once may come back in any order: one that
			// found the rows locked by another is empty though rows are
			// due. Only the last claim under way decides.
			continue
		}
		if len(batch) == 0 {
			if drain {
				if recorded == nil {
					break
				}
				// Wait for what was claimed to be recorded, then claim
				// again if anything was sent since the last time here
				// (rows given back unsent would only come back unsent).
				for rec.held.Load() > 0 && ctx.Err() == nil && !rec.failing.Load() {
					select {
					case <-ctx.Done():
					case <-recorded:
					}
				}
				if attempted == progress {
					break
				}
				progress = attempted
				continue
			}
			// Outcomes of sent rows move their owners' windows on: claim
			// again. Rows given back unsent do not (they would only come
			// back unsent, until a wake-up).
		idle:
			for {
				select {
				case <-ctx.Done():
				case <-l.wake:
				case <-recorded:
					if rec.sent.Load() == sentBefore && !rec.failing.Load() {
						continue idle
					}
				}
				break
			}
			continue
		}
		rec.held.Add(int64(len(batch)))
		for l.perOwner == 0 && len(batch) >= asked && len(ahead) < claimsAhead && !rec.failing.Load() {
			ahead = append(ahead, d.claimAhead(ctx, l, size))
		}
		handing := time.Now()
		for i, c := range batch {
			if ctx.Err() != nil || rec.failing.Load() {
				for _, r := range batch[i:] {
					rec.add(outcome{id: r.n.ID, created: r.n.CreatedAt, kind: outcomeUnclaim})
				}
				continue claim
			}
			// A row whose lease cannot outlast a whole attempt (plus a
			// tenth of the lease for recording) goes back unsent: another
			// replica may take it over before we could record.
			if !d.leaseCovers(l, c) {
				rec.add(outcome{id: c.n.ID, created: c.n.CreatedAt, kind: outcomeUnclaim})
				continue
			}
			select {
			case work <- c:
				attempted++
			case <-ctx.Done():
				for _, r := range batch[i:] {
					rec.add(outcome{id: r.n.ID, created: r.n.CreatedAt, kind: outcomeUnclaim})
				}
				break claim
			}
		}
		if l.perOwner == 0 {
			size = claimSize(base, len(batch)-concurrency, time.Since(handing), span)
			rec.slots.setLimit(d.unrecorded(concurrency, size))
		}
	}
	dropAhead()
	close(work)
	workers.Wait()
	if ferr := rec.close(); ferr != nil && err == nil {
		err = ferr
	}
	return attempted, err
}

// claimsAhead is how many claims of its next batches a lane that is not
// fair keeps under way while it hands out a full batch: two, so that
// claims (the statement that costs most per row) overlap each other as
// well as the sends.
const claimsAhead = 2

// claimResult is the outcome of a claim made ahead (claimAhead).
type claimResult struct {
	batch []*claimedRow
	err   error
	asked int // the claim's limit
}

// claimAhead claims up to limit rows of l's next batch in the background;
// the channel receives its result once.
func (d *Deliverer) claimAhead(ctx context.Context, l *lane, limit int) <-chan claimResult {
	ch := make(chan claimResult, 1)
	go func() {
		batch, err := d.claim(ctx, l, limit)
		ch <- claimResult{batch: batch, err: err, asked: limit}
	}()
	return ch
}

// claimSpan is how much of a lane's sending one claim holds once the lane
// has shown its pace (claimSize), and maxClaimFactor how many times
// delivery.batch_size it may hold at most.
const (
	claimSpan      = 100 * time.Millisecond
	maxClaimFactor = 8
)

// claimSize is the size of a lane's next claim, after it handed out paced
// rows of its last batch in took (the rows beyond its idle workers, each
// handed out only when a worker finished one): about span (claimSpan) of
// sending at that pace, as base (delivery.batch_size) times a power of two, at
// least base and at most maxClaimFactor times base.
//
// A claim is a statement and a commit whatever its size, so a fast
// receiver is sent more rows per claim (a backlog of 5,000 to a local
// receiver: about 10 claims instead of 50), while a slow one keeps
// base-sized claims, whose leases its workers can cover. The sizes are
// few, each its own prepared claim (its limit is written in the
// statement). The send slots follow the claim (unrecorded: twice it), so
// that each write of outcomes takes what finished while the last one ran
// rather than workers waiting for slots; what a crash can make the lane
// send again is then about twice claimSpan of its sending.
func claimSize(base, paced int, took, span time.Duration) int {
	if paced <= 0 || took <= 0 {
		return base
	}
	want := float64(paced) * float64(span) / float64(took)
	size := base
	for size < maxClaimFactor*base && float64(size) < want {
		size *= 2
	}
	return size
}

// unrecorded is how many rows a lane with the given concurrency, claiming
// claim rows at a time, may have sent and not yet recorded, its send
// slots: twice the claim (or twice the concurrency, if more), so that
// sends go on at full speed while the outcomes of a batch are written. It
// is what a crash or a database outage may make a lane send twice: twice
// delivery.batch_size, or about twice claimSpan of sending for a lane
// whose claims grew (claimSize), at most 2 × maxClaimFactor ×
// delivery.batch_size.
func (d *Deliverer) unrecorded(concurrency, claim int) int {
	if d.maxUnrecorded > 0 {
		return d.maxUnrecorded
	}
	return max(2*concurrency, 2*claim)
}

// leaseCovers reports whether c's lease outlasts a whole attempt plus a
// tenth of the lease for recording the outcome; otherwise another replica
// could take the row over while it is being sent.
func (d *Deliverer) leaseCovers(l *lane, c *claimedRow) bool {
	return time.Until(c.leaseEnd) >= l.cfg.Timeout+d.conf.Lease/10
}

// claimedRow is a claimed notification and the end of its lease as seen
// by the local clock (measured from before the claim, so conservative).
type claimedRow struct {
	n        *Notification
	leaseEnd time.Time
}

// claim claims up to limit rows of l (a fair lane: its own limit).
func (d *Deliverer) claim(ctx context.Context, l *lane, limit int) ([]*claimedRow, error) {
	start := time.Now()
	var rows []outbox.Claimed
	var err error
	if l.perOwner > 0 {
		fair := min(d.conf.BatchSize, max(l.cfg.Concurrency, 1))
		rows, err = outbox.ClaimFair(ctx, d.pool, l.name, d.conf.Owner, fair, d.conf.Lease, l.perOwner)
	} else {
		rows, err = outbox.Claim(ctx, d.pool, l.name, d.conf.Owner, limit, d.conf.Lease)
	}
	if err != nil {
		return nil, err
	}
	leaseEnd := start.Add(d.conf.Lease)
	out := make([]*claimedRow, 0, len(rows))
	expired := 0
	for _, r := range rows {
		if r.TakenOver {
			expired++
		}
		n := &Notification{ID: r.ID, DedupeKey: r.DedupeKey, Sink: r.Sink, Source: r.Source, RecordID: r.RecordID,
			Watch: r.Watch, Kind: r.Kind, Title: r.Title, Body: r.Body, Urgency: r.Urgency, Reason: r.Reason, Attempt: r.Attempts, CreatedAt: r.CreatedAt}
		// Every lane sends the stored text when it can (so that a row's
		// body is the same bytes whichever sink, wrapper or replica sends
		// it); only a sink that reads Payload gets it decoded as well.
		var stored bool
		n.body, stored = storedBody(n.ID, r.Payload)
		if !stored || !l.stored {
			if n.Payload, err = decodePayload(n.ID, r.Payload); err != nil {
				d.conf.Metrics.ClaimsExpired(metrics.ComponentDelivery, expired)
				return nil, err
			}
		}
		n.DeliveryID = newDeliveryID(n.ID, n.Attempt)
		out = append(out, &claimedRow{n: n, leaseEnd: leaseEnd})
	}
	d.conf.Metrics.ClaimsExpired(metrics.ComponentDelivery, expired)
	return out, nil
}

// attempt sends one notification and returns the outcome to record.
func (d *Deliverer) attempt(ctx context.Context, l *lane, c *claimedRow, logger *slog.Logger) outcome {
	n := c.n
	// An attempt that started runs to its end (bounded by the sink's
	// timeout) even when the deliverer stops: cutting it off half-way
	// would only make a repeat more likely.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
	start := time.Now()
	err := d.conf.Redactor.Error(safeDeliver(sctx, l.sink, n))
	cancel()
	now := time.Now()
	// What the attempt's row keeps: when it started, how long it took,
	// the receiver's answer (cut, then redacted, so that a secret cut in
	// two is hidden too).
	status, response := n.Answer()
	o := outcome{id: n.ID, created: n.CreatedAt, at: now, started: start, took: now.Sub(start), status: status,
		response: d.conf.Redactor.String(outbox.Excerpt(response))}
	if err == nil {
		d.conf.Metrics.Delivery(l.name, "delivered", now.Sub(start))
		if logger.Enabled(ctx, slog.LevelDebug) { // its arguments allocate, at every delivery
			logger.Debug("delivered", "notification_id", n.ID, "dedupe_key", n.DedupeKey, "attempt", n.Attempt,
				"delivery_id", n.DeliveryID, "duration_ms", now.Sub(start).Milliseconds())
		}
		o.kind = outcomeDelivered
		return o
	}
	var denied *egress.DeniedError
	o.refused = errors.As(err, &denied)
	var perm *PermanentError
	var ra *RetryAfterError
	next := now.Add(service.Backoff{Min: d.conf.RetryMin, Max: d.conf.RetryMax}.Delay(n.Attempt))
	kind := outcomeRetry
	switch {
	case errors.As(err, &perm):
		kind = outcomeDead
	case n.Attempt >= l.cfg.MaxAttempts:
		kind = outcomeDead
		err = fmt.Errorf("gave up after %d attempts: %w", n.Attempt, err)
	case errors.As(err, &ra) && ra.At.After(next):
		next = ra.At
		if limit := now.Add(maxRetryAfter); next.After(limit) {
			next = limit
		}
	}
	attrs := []any{"notification_id", n.ID, "dedupe_key", n.DedupeKey, "attempt", n.Attempt, "delivery_id", n.DeliveryID, "error", err}
	if kind == outcomeDead {
		d.conf.Metrics.Delivery(l.name, "dead", now.Sub(start))
		logger.Error("notification is dead", attrs...)
	} else {
		d.conf.Metrics.Delivery(l.name, "retry", now.Sub(start))
		logger.Warn("delivery failed; will retry", append(attrs, "next_attempt_at", next)...)
	}
	o.kind, o.next, o.err = kind, next, Snippet(err.Error(), 2000)
	return o
}

// safeDeliver turns a sink's panic into a failed attempt.
func safeDeliver(ctx context.Context, s Sink, n *Notification) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sink panicked: %v", r)
		}
	}()
	return s.Deliver(ctx, n)
}

// Outcome kinds.
const (
	outcomeDelivered = outbox.Delivered
	outcomeRetry     = outbox.Retry
	outcomeDead      = outbox.Dead
	outcomeUnclaim   = outbox.Unclaim // never attempted: pending again, attempt not counted
)

type outcome struct {
	id      int64
	created time.Time
	kind    string
	at      time.Time
	next    time.Time
	err     string
	sent    bool // holds a send slot until recorded
	// The attempt's row (delivery_attempts): when it started, how long it
	// took, whether the egress policy refused it, the receiver's answer.
	started  time.Time
	took     time.Duration
	refused  bool
	status   int
	response string
}

// recordBatch is the most outcomes one statement writes.
const recordBatch = 500

// recordGiveUp is how long a stopping lane keeps trying to record
// outcomes while the database does not answer; the rows left are sent
// again after their lease.
const recordGiveUp = 10 * time.Second

// recorder writes outcomes as soon as they come, in batches (group
// commit): while one UPDATE runs, the outcomes that finish meanwhile queue
// up and go together in the next, up to recordBatch rows. Under load that
// is few statements; idle, a finished delivery is recorded at once, which
// keeps the window in which a crash causes a repeat small.
//
// A write that fails is retried with backoff, outcomes kept, until it
// succeeds; meanwhile failing is set and the lane sends nothing. A sent
// outcome holds one of the lane's send slots until it is written.
type recorder struct {
	d      *Deliverer
	logger *slog.Logger
	ctx    context.Context
	in     chan outcome
	done   chan error
	slots  *sendSlots

	// failing is set by a failed write and cleared by the next success.
	failing atomic.Bool
	// recovered receives a token when writes succeed again.
	recovered chan struct{}
	// held counts the rows the lane claimed whose outcome is not written
	// yet (the lane adds a batch's rows, the recorder takes them off).
	held atomic.Int64
	// sent counts the outcomes of sent rows written (or given up).
	sent atomic.Int64
	// recorded receives a token after every write of outcomes, failed or
	// not, and when outcomes are given up.
	recorded chan struct{}
}

// newRecorder returns a running recorder with the given send slots (the
// lane may change their number: sendSlots.setLimit); its queue holds
// queue outcomes — those of the most slots the lane gives it and of the
// rows it may have claimed, given back unsent — so that a worker or the
// lane adding an outcome does not wait while a write is in flight.
func newRecorder(ctx context.Context, d *Deliverer, logger *slog.Logger, slots, queue int) *recorder {
	r := &recorder{d: d, logger: logger, ctx: ctx, in: make(chan outcome, queue), done: make(chan error, 1),
		slots: newSendSlots(slots), recovered: make(chan struct{}, 1), recorded: make(chan struct{}, 1)}
	go r.run()
	return r
}

func (r *recorder) add(o outcome) { r.in <- o }

// acquire takes a send slot, waiting for an earlier send to be recorded.
func (r *recorder) acquire() { r.slots.acquire() }

// release gives a send slot back.
func (r *recorder) release() { r.slots.release() }

// sendSlots is a counting semaphore whose limit can change while it is
// held: a lower limit lets no one in until enough slots were given back.
type sendSlots struct {
	mu          sync.Mutex
	freed       sync.Cond
	used, limit int
}

func newSendSlots(limit int) *sendSlots {
	s := &sendSlots{limit: limit}
	s.freed.L = &s.mu
	return s
}

// acquire takes a slot, waiting while every slot is taken.
func (s *sendSlots) acquire() {
	s.mu.Lock()
	for s.used >= s.limit {
		s.freed.Wait()
	}
	s.used++
	s.mu.Unlock()
}

// release gives a slot back.
func (s *sendSlots) release() {
	s.mu.Lock()
	s.used--
	s.mu.Unlock()
	s.freed.Signal()
}

// setLimit changes how many slots there are.
func (s *sendSlots) setLimit(n int) {
	s.mu.Lock()
	grew := n > s.limit
	s.limit = n
	s.mu.Unlock()
	if grew {
		s.freed.Broadcast()
	}
}

// close flushes what is left and returns the error of outcomes it could
// not write.
func (r *recorder) close() error {
	close(r.in)
	return <-r.done
}

func (r *recorder) run() {
	var pending []outcome
	var lastErr error
	var failedAt, stopAt time.Time
	in, ctxDone := r.in, r.ctx.Done()
	backoff := service.Backoff{Min: 20 * time.Millisecond, Max: 2 * time.Second}
	// stopping is when the lane stopped (or 0): from then on, recordGiveUp bounds the retries.
	stopping := func() {
		if stopAt.IsZero() {
			stopAt = time.Now()
		}
	}
	take := func(o outcome, ok bool) {
		if !ok {
			in = nil
			stopping()
			return
		}
		pending = append(pending, o)
	}
	for {
		if len(pending) == 0 {
			if in == nil {
				break
			}
			o, ok := <-in
			take(o, ok)
			continue
		}
	gather:
		for in != nil && len(pending) < recordBatch {
			select {
			case o, ok := <-in:
				take(o, ok)
			default:
				break gather
			}
		}
		batch := pending[:min(len(pending), recordBatch)]
		err := r.d.record(batch)
		if err == nil {
			r.releaseSent(batch)
			r.written(len(batch))
			pending = pending[len(batch):]
			lastErr = nil
			backoff.Reset()
			if r.failing.Swap(false) {
				r.logger.Info("recording delivery outcomes works again; sending resumes",
					"failed_for_ms", time.Since(failedAt).Milliseconds())
				select {
				case r.recovered <- struct{}{}:
				default:
				}
			}
			continue
		}
		lastErr = err
		if !r.failing.Swap(true) {
			failedAt = time.Now()
			r.logger.Error("record delivery outcomes; sending stops until the database answers again", "error", err, "rows", len(pending))
		}
		r.written(0) // a fair lane waiting for outcomes sees failing
		if !stopAt.IsZero() && time.Since(stopAt) > recordGiveUp {
			r.logger.Error("record delivery outcomes: gave up; those rows are sent again after their lease", "error", err, "rows", len(pending))
			r.releaseSent(pending)
			r.written(len(pending))
			pending = nil
			if in == nil {
				break
			}
			continue
		}
		// Wait before the next try, taking new outcomes meanwhile so that
		// workers never block on a full channel.
		t := time.NewTimer(backoff.Next())
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case o, ok := <-in:
				take(o, ok)
			case <-ctxDone:
				stopping()
				ctxDone = nil
			}
		}
		t.Stop()
	}
	r.done <- lastErr
}

// written takes n written (or abandoned) outcomes off held and tells the
// lane (n is 0 after a failed write).
func (r *recorder) written(n int) {
	r.held.Add(-int64(n))
	select {
	case r.recorded <- struct{}{}:
	default:
	}
}

// releaseSent gives back the send slots of the sent outcomes in outs.
func (r *recorder) releaseSent(outs []outcome) {
	for _, o := range outs {
		if o.sent {
			r.release()
			r.sent.Add(1)
		}
	}
}

// record writes outcomes in one statement, with the delivery_attempts
// row of each attempt (outbox.Record). Rows whose lease this replica lost
// are left alone (lease_owner fences).
func (d *Deliverer) record(outs []outcome) error {
	rows := make([]outbox.Outcome, len(outs))
	for i, o := range outs {
		rows[i] = outbox.Outcome{ID: o.id, CreatedAt: o.created, Kind: o.kind, At: o.at, Next: o.next, Err: o.err,
			Started: o.started, Duration: o.took, Refused: o.refused, HTTPStatus: o.status, Response: o.response}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return outbox.Record(ctx, d.pool, d.conf.Owner, rows)
}
