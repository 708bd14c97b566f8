package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
)

// Partitions of the history tables (migration 16): one per UTC week,
// starting on Monday, named <table>_pYYYYMMDD after that Monday, plus the
// DEFAULT partition <table>_default, which holds rows of a week that has
// no partition (yet).
const (
	// Week is the width of a partition.
	Week = 7 * 24 * time.Hour
	// Ahead is how many weeks after the current one have their partition
	// made in advance.
	Ahead = 3
	// lockTimeout bounds the wait for the table locks that attaching and
	// dropping a partition take (an ACCESS EXCLUSIVE lock on the partition,
	// and on the parent to drop it): a maintenance step that would wait
	// longer, behind a long query, gives up and is retried at the next
	// round, rather than queue every writer of the table behind it.
	lockTimeout = "3s"
)

// WeekOf returns the start of the partition week holding t: its Monday,
// 00:00 UTC.
func WeekOf(t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	back := (int(day.Weekday()) + 6) % 7 // days since Monday
	return day.AddDate(0, 0, -back)
}

// PartitionName is the name of table's partition for the week starting at
// week.
func PartitionName(table string, week time.Time) string {
	return table + "_p" + week.UTC().Format("20060102")
}

// partition is one weekly partition of a table.
type partition struct {
	name      string
	from, end time.Time
}

// partitions lists the weekly partitions of t, oldest first, and whether
// it has its default partition. Partitions not named by lookout's
// convention are left alone.
func partitions(ctx context.Context, conn *pgx.Conn, t table) ([]partition, bool, error) {
	rows, err := conn.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`, t.name)
	if err != nil {
		return nil, false, fmt.Errorf("list partitions of %s: %w", t.name, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, fmt.Errorf("list partitions of %s: %w", t.name, err)
	}
	var out []partition
	def := false
	for _, n := range names {
		if n == t.name+"_default" {
			def = true
			continue
		}
		day, ok := strings.CutPrefix(n, t.name+"_p")
		if !ok {
			continue
		}
		from, err := time.Parse("20060102", day)
		if err != nil {
			continue
		}
		out = append(out, partition{name: n, from: from, end: from.Add(Week)})
	}
	slices.SortFunc(out, func(a, b partition) int { return a.from.Compare(b.from) })
	return out, def, nil
}

// ensure gives t a partition for every week from the current one (of
// Config.Now) to Ahead weeks later, and for every week of which the default partition holds
// rows (moving them in); it returns the partitions made.
func (p *Pruner) ensure(ctx context.Context, conn *pgx.Conn, t table) ([]string, error) {
	have, def, err := partitions(ctx, conn, t)
	if err != nil {
		return nil, err
	}
	now := p.conf.Now()
	want := map[time.Time]bool{}
	for i := range Ahead + 1 {
		want[WeekOf(now).Add(time.Duration(i)*Week)] = true
	}
	if def {
		// The default partition is empty unless the maintenance fell
		// behind, or rows came with times long past or far ahead.
		rows, err := conn.Query(ctx, fmt.Sprintf(`
			SELECT DISTINCT date_trunc('week', %s AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' FROM %s`,
			t.key, pgx.Identifier{t.name + "_default"}.Sanitize()))
		if err != nil {
			return nil, fmt.Errorf("read the weeks of %s_default: %w", t.name, err)
		}
		weeks, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		if err != nil {
			return nil, fmt.Errorf("read the weeks of %s_default: %w", t.name, err)
		}
		for _, w := range weeks {
			want[w.UTC()] = true
		}
	}
	for _, h := range have {
		delete(want, h.from)
	}
	weeks := make([]time.Time, 0, len(want))
	for w := range want {
		weeks = append(weeks, w)
	}
	slices.SortFunc(weeks, time.Time.Compare)
	var made []string
	for _, w := range weeks {
		name, err := p.attach(ctx, conn, t, w, def)
		if err != nil {
			return made, err
		}
		made = append(made, name)
	}
	return made, nil
}

// attach makes t's partition of the week starting at week, in one
// transaction: the table is created apart, with the default partition's
// storage parameters, the default partition's rows of that week (if any)
// move into it, and it is attached. Attaching builds its indexes from the
// parent's.
func (p *Pruner) attach(ctx context.Context, conn *pgx.Conn, t table, week time.Time, def bool) (string, error) {
	name := PartitionName(t.name, week)
	part := pgx.Identifier{name}.Sanitize()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+lockTimeout+`'`); err != nil {
			return err
		}
		// The storage parameters (notifications' fillfactor, migration
		// 58) are the default partition's: a partitioned table holds
		// none, and LIKE copies none.
		with := ""
		if def {
			if err := tx.QueryRow(ctx, `
				SELECT coalesce(' WITH (' || string_agg(quote_ident(option_name) || ' = ' || quote_literal(option_value), ', ') || ')', '')
				FROM pg_options_to_table((SELECT reloptions FROM pg_class WHERE oid = $1::regclass))`,
				pgx.Identifier{t.name + "_default"}.Sanitize()).Scan(&with); err != nil {
				return fmt.Errorf("read the storage parameters of %s_default: %w", t.name, err)
			}
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)%s`,
			part, pgx.Identifier{t.name}.Sanitize(), with)); err != nil {
			return err
		}
		if def {
			var cols string
			if err := tx.QueryRow(ctx, `
				SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
				WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, t.name).Scan(&cols); err != nil {
				return err
			}
			// The marker keeps it out of a release's recorded statements
			// (internal/pgtest): an older binary reads the columns anew.
			if _, err := tx.Exec(ctx, fmt.Sprintf(`
				/* not recorded: its columns are read from the catalog when it runs */
				WITH moved AS (DELETE FROM %[1]s WHERE %[2]s >= $1 AND %[2]s < $2 RETURNING %[3]s)
				INSERT INTO %[4]s (%[3]s) SELECT %[3]s FROM moved`,
				pgx.Identifier{t.name + "_default"}.Sanitize(), t.key, cols, part), week, week.Add(Week)); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
			pgx.Identifier{t.name}.Sanitize(), part, week.Format(time.RFC3339), week.Add(Week).Format(time.RFC3339)))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("make partition %s: %w", name, err)
	}
	p.logger.Info("partition made", "table", t.name, "partition", name)
	return name, nil
}

// pruneTable prunes t's rows older than w: whole partitions where it can,
// rows where it must.
//
// A weekly partition whose every row is older than the cutoff (its end is
// not after it) is dropped whole when it holds no pending work (t.pending);
// one that does is kept, and its rows that are not pending are deleted in
// batches. The default partition is pruned by rows. The partition that
// straddles the cutoff stays until its week is past the window: a table
// keeps between its window and a week more.
func (p *Pruner) pruneTable(ctx context.Context, conn *pgx.Conn, t table, w time.Duration, dry bool) (TableResult, error) {
	tr := TableResult{Table: t.name, Window: w, Cutoff: p.conf.Now().Add(-w)}
	parts, def, err := partitions(ctx, conn, t)
	if err != nil {
		return tr, err
	}
	var byRows []string
	if def {
		byRows = append(byRows, t.name+"_default")
	}
	for _, part := range parts {
		if part.end.After(tr.Cutoff) {
			break
		}
		pending, err := t.holdsPending(ctx, conn, part.name)
		if err != nil {
			return tr, err
		}
		if pending {
			byRows = append(byRows, part.name)
			tr.Kept = append(tr.Kept, part.name)
			continue
		}
		if dry {
			tr.Dropped = append(tr.Dropped, part.name)
			continue
		}
		dropped, err := p.drop(ctx, conn, t, part.name)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
			p.logger.Warn("partition busy; dropped at a later prune", "table", t.name, "partition", part.name, "error", err)
		case err != nil:
			return tr, err
		case dropped:
			tr.Dropped = append(tr.Dropped, part.name)
		default:
			byRows = append(byRows, part.name)
			tr.Kept = append(tr.Kept, part.name)
		}
	}
	for _, rel := range byRows {
		n, batches, err := p.pruneRows(ctx, conn, t, rel, tr.Cutoff, dry)
		tr.Rows += n
		tr.Batches += batches
		if err != nil {
			return tr, err
		}
	}
	return tr, nil
}

// drop drops partition part of t whole, in one transaction with what goes
// with its rows (t.onDrop: the dedupe keys of notifications). It locks the
// parent (dropping a partition needs it), then checks once more that the
// partition holds no pending work: an operator may have sent a dead
// notification back since. It reports whether it dropped the partition.
func (p *Pruner) drop(ctx context.Context, conn *pgx.Conn, t table, part string) (bool, error) {
	dropped := false
	rel := pgx.Identifier{part}.Sanitize()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+lockTimeout+`'`); err != nil {
			return err
		}
		if t.onDrop != "" {
			sh, err := db.ShardingOf(ctx, tx)
			if err != nil {
				return err
			}
			onDrop := t.onDrop
			if sh.Distributed() && t.onDropDistributed != "" {
				onDrop = t.onDropDistributed
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(onDrop, rel)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{t.name}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		pending, err := t.holdsPending(ctx, tx.Conn(), part)
		if err != nil {
			return err
		}
		if pending {
			return errPending
		}
		_, err = tx.Exec(ctx, `DROP TABLE `+rel)
		dropped = err == nil
		return err
	})
	if errors.Is(err, errPending) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("drop partition %s: %w", part, err)
	}
	return dropped, nil
}

// errPending rolls back a drop that found pending work.
var errPending = errors.New("the partition holds pending work")

// holdsPending reports whether partition part of t holds pending work.
func (t table) holdsPending(ctx context.Context, conn *pgx.Conn, part string) (bool, error) {
	if t.pending == "" {
		return false, nil
	}
	var pending bool
	if err := conn.QueryRow(ctx, fmt.Sprintf(t.pending, pgx.Identifier{part}.Sanitize())).Scan(&pending); err != nil {
		return false, fmt.Errorf("look for pending work in %s: %w", part, err)
	}
	return pending, nil
}
