// Package postgres is the postgres connector: the rows of a table, or of
// a query, of another PostgreSQL database, one record per row.
//
//	connector: postgres
//	postgres:
//	  dsn: ${AGENT_TASKS_DSN}
//	  table: agent_tasks
//	  key: id
//	  cursor: updated_at
//	  lookback: 1m
//
// An incremental source (the default) reads in keyset pages ordered by
// (cursor, key): each page carries the last (cursor, key) it read, so a
// run cut short resumes after its last committed page, and the next run
// reads only rows whose cursor is past it (less lookback); the rows
// deleted_when selects are emitted as deleted items, and every
// full_scan_every the run asks the syncer to look its records up by key
// (Present), so that rows removed by DELETE are recorded as deleted. A
// snapshot source (snapshot: true) reads everything in key order at every
// run, so that rows that vanished, and rows deleted_when selects, are
// recorded as deleted (behind the syncer's deletion guard).
//
// Every page is read in its own transaction, BEGIN READ ONLY with SET
// LOCAL statement_timeout: a query that tries to write fails, and none
// runs longer than statement_timeout. The run holds one connection,
// opened through Options.Dial (the syncer's egress policy). Values become
// JSON: timestamps RFC 3339 in UTC, numeric as exact JSON numbers, bytea
// as base64, json and jsonb as they are, other types as to_jsonb gives
// them.
package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("postgres", Decode, newFromSettings)
}

// Options are the typed settings of New.
type Options struct {
	// DSN is the connection string. Required.
	DSN string
	// Table (a name or schema.name) or Query: exactly one is required.
	Table, Query string
	// Key is the record id's column. Required.
	Key string
	// Cursor is the incremental read's column; required unless Snapshot.
	Cursor string
	// Lookback is subtracted from the last cursor value at a run's start.
	Lookback time.Duration
	// Snapshot reads everything in key order at every run.
	Snapshot bool
	// DeletedWhen selects the rows recorded as deleted: a column or an
	// SQL boolean expression. Defaults to none.
	DeletedWhen string
	// FullScanEvery is how often an incremental run asks for a key check
	// (Result.CheckKeys). Defaults to 0: never.
	FullScanEvery time.Duration
	// Now is the clock of the key checks' schedule. Defaults to time.Now.
	Now func() time.Time
	// PageSize is rows per page. Defaults to 1000.
	PageSize int
	// MaxPages bounds one run. Defaults to 1000.
	MaxPages int
	// StatementTimeout bounds every statement. Defaults to 30s.
	StatementTimeout time.Duration
	// Timeout bounds connecting. Defaults to 30s.
	Timeout time.Duration
	// Source names the source in errors. Defaults to "postgres".
	Source string
	// Errorf makes a configuration error at a key of the source (the
	// source's src.Errorf). Defaults to "key message".
	Errorf func(key, format string, args ...any) error
	// Dial opens the TCP connections. Defaults to a net.Dialer.
	Dial connectors.DialFunc
	// Logger receives warnings. Defaults to slog.Default().
	Logger *slog.Logger
	// BetweenPages, when set, is called before every page after the
	// first with the page's number and the process id of the upstream
	// connection: tests use it to cut the connection between two pages.
	// Defaults to none.
	BetweenPages func(ctx context.Context, page int, pid uint32)
}

// Connector reads the rows of one table or query.
type Connector struct {
	o     Options
	cfg   *pgx.ConnConfig
	table pgx.Identifier
}

var (
	_ connectors.Connector   = (*Connector)(nil)
	_ connectors.Snapshotter = (*Connector)(nil)
	_ connectors.Verifier    = (*Connector)(nil)
	_ connectors.KeyChecker  = (*Connector)(nil)
)

// New returns the connector of o. It parses the DSN and does not connect.
func New(o Options) (*Connector, error) {
	if o.Errorf == nil {
		o.Errorf = func(key, format string, args ...any) error {
			return fmt.Errorf("%s %s", key, fmt.Sprintf(format, args...))
		}
	}
	if (o.Table == "") == (strings.TrimSpace(o.Query) == "") {
		return nil, o.Errorf("postgres.table", "or postgres.query is required, not both")
	}
	if o.Key == "" || (!o.Snapshot && o.Cursor == "") {
		return nil, o.Errorf("postgres.key", "and postgres.cursor (unless snapshot) are required")
	}
	cfg, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		return nil, o.Errorf("postgres.dsn", "is not a valid PostgreSQL connection string")
	}
	c := &Connector{o: o, cfg: cfg}
	if o.Table != "" {
		if c.table, err = tableIdent(o.Table); err != nil {
			return nil, o.Errorf("postgres.table", "%v", err)
		}
	}
	c.o.PageSize = cmp.Or(o.PageSize, PageSizeDefault)
	c.o.MaxPages = cmp.Or(o.MaxPages, MaxPagesDefault)
	c.o.StatementTimeout = cmp.Or(o.StatementTimeout, StatementTimeoutDefault)
	c.o.Timeout = cmp.Or(o.Timeout, config.TimeoutDefault)
	c.o.Source = cmp.Or(o.Source, "postgres")
	if c.o.Dial == nil {
		c.o.Dial = (&net.Dialer{}).DialContext
	}
	if c.o.Logger == nil {
		c.o.Logger = slog.Default()
	}
	if c.o.Now == nil {
		c.o.Now = time.Now
	}
	cfg.ConnectTimeout = c.o.Timeout
	cfg.DialFunc = pgconn.DialFunc(c.o.Dial)
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "lookout " + c.o.Source
	}
	return c, nil
}

// Snapshot reports whether every run reads the whole set (snapshot: true).
func (c *Connector) Snapshot() bool { return c.o.Snapshot }

// State is the cursor stored in sources.cursor: the (cursor, key) of the
// last row read, as PostgreSQL writes them as text (cursor only for an
// incremental source), and when the last key check was asked for
// (full_scan_every). An empty State starts from the beginning.
type State struct {
	Cursor    *string    `json:"cursor,omitempty"`
	Key       *string    `json:"key,omitempty"`
	ScannedAt *time.Time `json:"scanned_at,omitempty"`
}

func (st State) encode() json.RawMessage {
	b, _ := json.Marshal(st) // optional strings and a time: cannot fail
	return b
}

// Verify connects, reads the columns of the table or query and checks
// that the key, the cursor and deleted_when name columns it has.
func (c *Connector) Verify(ctx context.Context) error {
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	_, err = c.plan(ctx, conn)
	return err
}

// Fetch reads the rows after cursor, one page per read-only transaction.
func (c *Connector) Fetch(ctx context.Context, raw json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var res connectors.Result
	var st State
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &st); err != nil {
			return res, fmt.Errorf("stored cursor is not a cursor of this connector (reset it: set the cursor of its row in the sources table to '{}'): %w", err)
		}
	}
	// A cursor of the other mode (the source's snapshot key changed)
	// starts from the beginning.
	if c.o.Snapshot && st.Cursor != nil || !c.o.Snapshot && st.Cursor == nil {
		st = State{ScannedAt: st.ScannedAt}
	}
	resumed := st.Key != nil
	conn, err := c.connect(ctx)
	if err != nil {
		return res, err
	}
	defer closeConn(conn)
	res.Requests++
	p, err := c.plan(ctx, conn)
	if err != nil {
		return res, err
	}
	first := true
	for page := 1; ; page++ {
		if page > c.o.MaxPages {
			c.o.Logger.Debug("postgres: max_pages reached; the next run goes on from here", "source", c.o.Source, "max_pages", c.o.MaxPages)
			break
		}
		if page > 1 && c.o.BetweenPages != nil {
			c.o.BetweenPages(ctx, page, conn.PgConn().PID())
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		items, next, err := c.readPage(ctx, conn, p, st, first, page)
		res.Requests++
		if err != nil {
			return res, err
		}
		first = false
		if len(items) == 0 {
			break
		}
		st = next
		if err := emit(ctx, connectors.Page{Items: items, Cursor: st.encode()}); err != nil {
			return res, err
		}
		if len(items) < c.o.PageSize {
			break
		}
	}
	if c.o.Snapshot {
		res.Complete = !resumed
		res.Cursor = State{}.encode() // the next run reads everything again
	} else if now := c.o.Now(); c.o.FullScanEvery > 0 && (st.ScannedAt == nil || now.Sub(*st.ScannedAt) >= c.o.FullScanEvery) {
		// Stored only once the syncer's key check succeeded (the run's
		// cursor): a failed check is asked for again by the next run.
		res.CheckKeys = true
		at := now.UTC()
		st.ScannedAt = &at
		res.Cursor = st.encode()
	}
	return res, nil
}

// Present returns those of ids (record ids: the key's values as text)
// whose row is still in the table or query and not one deleted_when
// selects, looked up by key in one read-only statement.
func (c *Connector) Present(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer closeConn(conn)
	p, err := c.plan(ctx, conn)
	if err != nil {
		return nil, err
	}
	k := alias + "." + quote(p.key.name)
	sql := p.with + "SELECT " + k + "::text FROM " + p.from + " WHERE " + k + " = ANY(CAST($1::text[] AS " + p.key.typ + "[]))"
	if p.notDeleted != "" {
		sql += " AND " + p.notDeleted
	}
	var present []string
	err = c.readTx(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, ids)
		if err != nil {
			return err
		}
		present, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "22P02" || pgErr.Code == "22003") { // invalid text representation, out of range
			return nil, c.o.Errorf("postgres.full_scan_every", "looks records up by key, and a record id is not a value of %s's type %s (%s): map fields.id as item.%s",
				p.key.name, p.key.typ, pgErr.Message, p.key.name)
		}
		return nil, c.sqlError("look up the keys of "+fmt.Sprint(len(ids))+" records in", err)
	}
	return present, nil
}

// connect opens the run's connection.
func (c *Connector) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, c.cfg)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000") {
			return nil, fmt.Errorf("connect to %s: %w: %s", c.where(), connectors.ErrUnauthorized, pgErr.Message)
		}
		return nil, fmt.Errorf("connect to %s: %w", c.where(), err)
	}
	return conn, nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// where names the upstream database without credentials.
func (c *Connector) where() string {
	return fmt.Sprintf("database %q on %s", c.cfg.Database, net.JoinHostPort(c.cfg.Host, fmt.Sprint(c.cfg.Port)))
}

// readTx runs fn in a read-only transaction bounded by statement_timeout,
// with the session settings the cursor's text depends on.
func (c *Connector) readTx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin read-only transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('TimeZone', 'UTC', true),
		set_config('DateStyle', 'ISO, YMD', true), set_config('IntervalStyle', 'iso_8601', true), set_config('extra_float_digits', '1', true)`,
		fmt.Sprintf("%dms", c.o.StatementTimeout.Milliseconds())); err != nil {
		return fmt.Errorf("set statement_timeout: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// column is one column of the table or query.
type column struct {
	name string
	oid  uint32
	typ  string // format_type's name, for casts
}

// plan is what a run learnt of the columns: the SELECT of a page.
type plan struct {
	cols []column
	// from is the FROM clause (with the query's WITH before it).
	with, from      string
	key, cursor     column
	deleted         string // the boolean expression of a deleted row, or ""
	notDeleted      string // the WHERE term leaving out deleted rows, or ""
	selectList      string
	timestampCursor bool
}

const alias = "lookout_rows"

// plan reads the columns of the table or query (a LIMIT 0 read) and
// checks the names the settings give.
func (c *Connector) plan(ctx context.Context, conn *pgx.Conn) (*plan, error) {
	p := &plan{}
	if c.o.Table != "" {
		p.from = c.table.Sanitize() + " AS " + alias
	} else {
		q := strings.TrimSpace(c.o.Query)
		q = strings.TrimSpace(strings.TrimRight(q, "; \t\r\n"))
		p.with = "WITH " + alias + " AS (\n" + q + "\n)\n"
		p.from = alias
	}
	err := c.readTx(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, p.with+"SELECT * FROM "+p.from+" LIMIT 0")
		if err != nil {
			return err
		}
		var oids []uint32
		for _, fd := range rows.FieldDescriptions() {
			p.cols = append(p.cols, column{name: fd.Name, oid: fd.DataTypeOID})
			oids = append(oids, fd.DataTypeOID)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT format_type(o, NULL) FROM unnest($1::oid[]) WITH ORDINALITY AS t(o, i) ORDER BY i`, oids)
		if err != nil {
			return err
		}
		types, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for i, t := range types {
			p.cols[i].typ = t
		}
		return nil
	})
	if err != nil {
		return nil, c.sqlError("read the columns of", err)
	}
	seen := map[string]bool{}
	for _, col := range p.cols {
		if seen[col.name] {
			return nil, c.o.Errorf(c.fromKey(), "returns the column %q twice: give each column its own name (AS)", col.name)
		}
		seen[col.name] = true
	}
	var ok bool
	if p.key, ok = c.find(p.cols, c.o.Key); !ok {
		return nil, c.unknown(p.cols, "postgres.key", c.o.Key)
	}
	if !c.o.Snapshot {
		if p.cursor, ok = c.find(p.cols, c.o.Cursor); !ok {
			return nil, c.unknown(p.cols, "postgres.cursor", c.o.Cursor)
		}
		switch p.cursor.oid {
		case pgtype.TimestamptzOID, pgtype.TimestampOID, pgtype.DateOID:
			p.timestampCursor = true
		}
		if c.o.Lookback > 0 && !p.timestampCursor {
			return nil, c.o.Errorf("postgres.lookback", "needs a date or timestamp cursor column; %s is not one", c.o.Cursor)
		}
	}
	if dw := strings.TrimSpace(c.o.DeletedWhen); dw != "" {
		if col, ok := c.find(p.cols, dw); ok && identRE.MatchString(dw) {
			if col.oid == pgtype.BoolOID {
				p.deleted = "coalesce(" + alias + "." + quote(col.name) + ", false)"
			} else {
				p.deleted = alias + "." + quote(col.name) + " IS NOT NULL"
			}
			p.notDeleted = "NOT " + p.deleted
		} else {
			p.deleted = "coalesce((" + dw + "), false)"
			p.notDeleted = "NOT " + p.deleted
			// Check the expression now, so that its error names its key.
			err := c.readTx(ctx, conn, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, p.with+"SELECT 1 FROM "+p.from+" WHERE "+p.notDeleted+" LIMIT 0")
				return err
			})
			if err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) {
					return nil, c.o.Errorf("postgres.deleted_when", "is not a boolean SQL expression over the columns (%s): %s", columnNames(p.cols), pgErr.Message)
				}
				return nil, c.sqlError("check postgres.deleted_when on", err)
			}
		}
	}
	exprs := make([]string, 0, len(p.cols)+2)
	for _, col := range p.cols {
		exprs = append(exprs, valueExpr(col))
	}
	exprs = append(exprs, alias+"."+quote(p.key.name)+"::text")
	if !c.o.Snapshot {
		exprs = append(exprs, alias+"."+quote(p.cursor.name)+"::text")
		if p.deleted != "" {
			exprs = append(exprs, p.deleted)
		}
	}
	p.selectList = strings.Join(exprs, ", ")
	return p, nil
}

// find returns the column named name.
func (c *Connector) find(cols []column, name string) (column, bool) {
	for _, col := range cols {
		if col.name == name {
			return col, true
		}
	}
	return column{}, false
}

// unknown is the error of a setting naming a column the rows do not have.
func (c *Connector) unknown(cols []column, key, name string) error {
	for _, col := range cols {
		if strings.EqualFold(col.name, name) {
			return c.o.Errorf(key, "names the column %q, which %s does not have; it has %q (names are case-sensitive)", name, c.what(), col.name)
		}
	}
	return c.o.Errorf(key, "names the column %q, which %s does not have (its columns: %s)", name, c.what(), columnNames(cols))
}

func columnNames(cols []column) string {
	names := make([]string, len(cols))
	for i, col := range cols {
		names[i] = col.name
	}
	return strings.Join(names, ", ")
}

func (c *Connector) what() string {
	if c.o.Table != "" {
		return "table " + c.o.Table
	}
	return "the query"
}

func (c *Connector) fromKey() string {
	if c.o.Table != "" {
		return "postgres.table"
	}
	return "postgres.query"
}

// sqlError explains an upstream error: a query that writes, a timeout, a
// missing table or privilege, a lost connection.
func (c *Connector) sqlError(doing string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "25006": // read_only_sql_transaction
			return c.o.Errorf(c.fromKey(), "tries to write, and the connector reads in a READ ONLY transaction (PostgreSQL said: %s); give it a SELECT that only reads", pgErr.Message)
		case "0A000": // feature_not_supported: a WITH that writes, under the connector's WITH
			if c.o.Query != "" {
				return c.o.Errorf("postgres.query", "is not a plain read (%s): the connector reads in a READ ONLY transaction; give it a SELECT", pgErr.Message)
			}
		case "57014": // query_canceled: statement_timeout
			return fmt.Errorf("%s %s: the statement ran longer than postgres.statement_timeout %s (add an index on the cursor and key, or raise it): %w",
				doing, c.what(), c.o.StatementTimeout, err)
		case "42P01": // undefined_table
			return c.o.Errorf(c.fromKey(), "names a table that does not exist in %s: %s", c.where(), pgErr.Message)
		case "42501": // insufficient_privilege
			return c.o.Errorf(c.fromKey(), "cannot be read with the DSN's role (GRANT SELECT to it): %s", pgErr.Message)
		case "42601", "42703", "42883", "42804": // syntax, undefined column or function, datatype mismatch
			if c.o.Query != "" {
				return c.o.Errorf("postgres.query", "is not a valid query: %s", pgErr.Message)
			}
		case "28P01", "28000":
			return fmt.Errorf("%s %s: %w: %s", doing, c.what(), connectors.ErrUnauthorized, pgErr.Message)
		}
	}
	return fmt.Errorf("%s %s in %s: %w", doing, c.what(), c.where(), err)
}

// readPage reads the page after st and returns its items and the state
// after it.
func (c *Connector) readPage(ctx context.Context, conn *pgx.Conn, p *plan, st State, first bool, page int) ([]connectors.Item, State, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	k := alias + "." + quote(p.key.name)
	order := k
	if c.o.Snapshot {
		where = append(where, k+" IS NOT NULL")
		if st.Key != nil {
			where = append(where, k+" > CAST("+arg(*st.Key)+" AS "+p.key.typ+")")
		}
		if p.notDeleted != "" {
			where = append(where, p.notDeleted)
		}
	} else {
		cur := alias + "." + quote(p.cursor.name)
		order = cur + ", " + k
		where = append(where, cur+" IS NOT NULL", k+" IS NOT NULL")
		switch {
		case st.Cursor == nil:
		case first && c.o.Lookback > 0:
			where = append(where, cur+" >= CAST("+arg(*st.Cursor)+" AS "+p.cursor.typ+") - make_interval(secs => "+arg(c.o.Lookback.Seconds())+")")
		default:
			where = append(where, "("+cur+", "+k+") > (CAST("+arg(*st.Cursor)+" AS "+p.cursor.typ+"), CAST("+arg(*st.Key)+" AS "+p.key.typ+"))")
		}
	}
	sql := p.with + "SELECT " + p.selectList + " FROM " + p.from + " WHERE " + strings.Join(where, " AND ") +
		" ORDER BY " + order + " LIMIT " + arg(c.o.PageSize)
	var items []connectors.Item
	next := st
	err := c.readTx(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := len(p.cols)
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			key, _ := vals[n].(string)
			next.Key = &key
			if !c.o.Snapshot {
				cur, _ := vals[n+1].(string)
				next.Cursor = &cur
			}
			loc := fmt.Sprintf("%s %s=%s", c.what(), p.key.name, key)
			raw, err := rowJSON(p.cols, vals[:n])
			if err != nil {
				return &connectors.ItemError{Loc: loc, Err: err}
			}
			v, err := normalize.Decode(raw)
			if err != nil {
				return &connectors.ItemError{Loc: loc, Err: err}
			}
			it := connectors.Item{Value: v, Raw: raw, Loc: loc}
			if !c.o.Snapshot && p.deleted != "" {
				it.Deleted, _ = vals[n+2].(bool)
			}
			items = append(items, it)
		}
		return rows.Err()
	})
	if err != nil {
		var ie *connectors.ItemError
		if errors.As(err, &ie) {
			return nil, st, err
		}
		after := "from the start"
		if st.Key != nil {
			after = "after " + p.key.name + " " + *st.Key
		}
		if ctx.Err() != nil {
			return nil, st, fmt.Errorf("page %d (%s) of %s: %w", page, after, c.what(), err)
		}
		if conn.IsClosed() || pgconn.SafeToRetry(err) || isConnLost(err) {
			return nil, st, fmt.Errorf("page %d (%s) of %s: the connection to %s was lost; the pages before it are kept and the next run resumes %s: %w",
				page, after, c.what(), c.where(), after, err)
		}
		return nil, st, fmt.Errorf("page %d (%s): %w", page, after, c.sqlError("read", err))
	}
	return items, next, nil
}

// isConnLost reports errors that end the session: an administrator's
// termination, a crash, a shutdown (class 57P, 08).
func isConnLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || slices.Contains([]string{"57P01", "57P02", "57P03"}, pgErr.Code)
	}
	return false
}

// quote quotes an identifier.
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }
