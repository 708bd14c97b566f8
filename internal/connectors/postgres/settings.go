package postgres

import (
	"cmp"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// Defaults of the postgres: block.
const (
	PageSizeDefault         = 1000
	MaxPagesDefault         = 1000
	StatementTimeoutDefault = 30 * time.Second
	// PageSizeMax bounds page_size: one page is one transaction of the
	// syncer and is held in memory.
	PageSizeMax = 10000
)

// Settings is the postgres: block of a source.
type Settings struct {
	// DSN is the upstream database's connection string (URL or key=value),
	// written as ${ENV_VAR} since it holds the password. Required.
	DSN string `yaml:"dsn"`
	// Table is the table or view to read, optionally schema-qualified
	// (public.agent_tasks). Exactly one of table and query is required.
	Table string `yaml:"table"`
	// Query is a SELECT whose rows are read, in place of a table. It runs
	// as a common table expression, so the connector's keyset filter is
	// pushed into it. Exactly one of table and query is required.
	Query string `yaml:"query"`
	// Key is the column whose value is the record id: unique and never
	// NULL. Required.
	Key string `yaml:"key"`
	// Cursor is the column the incremental read follows (updated_at, a
	// version number): every write of a row must raise it. Required unless
	// snapshot is true.
	Cursor string `yaml:"cursor"`
	// Lookback is subtracted from the last cursor value at the start of
	// every run, so that rows committed late with an older cursor value (a
	// long transaction's updated_at = now()) are read. Only for a date or
	// timestamp cursor column. Defaults to 0.
	Lookback time.Duration `yaml:"lookback"`
	// Snapshot makes every run read the whole table (or query), in key
	// order, so that rows no longer there, and rows deleted_when selects,
	// are recorded as deleted. Defaults to false (incremental on cursor).
	Snapshot bool `yaml:"snapshot"`
	// DeletedWhen names the rows to record as deleted: a boolean column, a
	// column that is not NULL on deleted rows (deleted_at), or an SQL
	// boolean expression over the columns. A snapshot leaves them out; an
	// incremental read reads them through the cursor like any row (the
	// soft delete must raise the cursor) and records their records as
	// deleted. Defaults to none.
	DeletedWhen string `yaml:"deleted_when"`
	// FullScanEvery is how often an incremental source checks, after a
	// run, which of its records' keys are still in the table (a lookup of
	// the mirror's ids by key, a page at a time), so that rows removed by
	// DELETE are recorded as deleted. Only without snapshot; the record id
	// must be the key (fields.id unset with key id, or item.<key>).
	// Defaults to 0 (never: an incremental source then sees only the
	// deletions deleted_when selects).
	FullScanEvery time.Duration `yaml:"full_scan_every"`
	// PageSize is the number of rows per page (one read transaction
	// upstream, one transaction of the syncer). Defaults to 1000.
	PageSize int `yaml:"page_size"`
	// MaxPages bounds one run; the next run goes on from there. Defaults
	// to 1000.
	MaxPages int `yaml:"max_pages"`
	// StatementTimeout bounds every statement upstream (SET LOCAL
	// statement_timeout). Defaults to 30s.
	StatementTimeout time.Duration `yaml:"statement_timeout"`
}

// identRE is a plain SQL identifier (a column written without quotes).
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// Decode reads the postgres: block of src, applies its defaults and
// checks it. It parses the DSN but does not connect.
func Decode(src *config.Source) (*Settings, error) {
	s := &Settings{}
	if err := src.DecodeBlock(s); err != nil {
		return nil, err
	}
	var errs []error
	bad := func(key, format string, args ...any) { errs = append(errs, src.Errorf(key, format, args...)) }
	if s.DSN == "" {
		bad("postgres.dsn", "is required (write it as ${ENV_VAR}: it holds the password)")
	} else if _, err := pgx.ParseConfig(s.DSN); err != nil {
		// pgx's message quotes the DSN with its password hidden; say less.
		bad("postgres.dsn", "is not a valid PostgreSQL connection string (a URL postgres://user@host:5432/db or key=value pairs)")
	}
	switch {
	case s.Table == "" && strings.TrimSpace(s.Query) == "":
		bad("postgres.table", "or postgres.query is required")
	case s.Table != "" && s.Query != "":
		bad("postgres.query", "cannot be set together with postgres.table (give one)")
	case s.Table != "":
		if _, err := tableIdent(s.Table); err != nil {
			bad("postgres.table", "%v", err)
		}
	}
	if s.Key == "" {
		bad("postgres.key", "is required (the column whose value is the record id)")
	} else if s.Key != "id" && src.Fields.ID == "" {
		bad("postgres.key", "is %q: records take their id from the item's id, so map it: fields: {id: item.%s}", s.Key, s.Key)
	}
	if s.Snapshot {
		if s.Cursor != "" {
			bad("postgres.cursor", "is not used with snapshot: true (every run reads the whole set in key order)")
		}
		if s.Lookback != 0 {
			bad("postgres.lookback", "is not used with snapshot: true")
		}
	} else {
		if s.Cursor == "" {
			bad("postgres.cursor", "is required unless snapshot is true (the column every write raises, e.g. updated_at)")
		}
	}
	switch {
	case s.FullScanEvery < 0:
		bad("postgres.full_scan_every", "must not be negative")
	case s.FullScanEvery > 0 && s.Snapshot:
		bad("postgres.full_scan_every", "is not used with snapshot: true (every run reads the whole set and records the rows gone)")
	case s.FullScanEvery > 0 && s.FullScanEvery < time.Minute:
		bad("postgres.full_scan_every", "must be at least 1m (each scan looks up every record's key upstream)")
	case s.FullScanEvery > 0 && s.Key != "" && !idIsKey(src.Fields.ID, s.Key):
		bad("postgres.full_scan_every", "needs the record id to be the key column (the scan looks records up by key): fields.id is %q; map it as item.%s", src.Fields.ID, s.Key)
	}
	if s.Cursor != "" && s.Cursor == s.Key {
		bad("postgres.cursor", "must differ from postgres.key (use snapshot: true to read in key order)")
	}
	if s.Lookback < 0 {
		bad("postgres.lookback", "must not be negative")
	}
	if s.PageSize < 0 || s.PageSize > PageSizeMax {
		bad("postgres.page_size", "must be between 1 and %d", PageSizeMax)
	}
	s.PageSize = cmp.Or(s.PageSize, PageSizeDefault)
	if s.MaxPages < 0 {
		bad("postgres.max_pages", "must be positive")
	}
	s.MaxPages = cmp.Or(s.MaxPages, MaxPagesDefault)
	if s.StatementTimeout < 0 {
		bad("postgres.statement_timeout", "must not be negative")
	} else if s.StatementTimeout > 0 && s.StatementTimeout < time.Millisecond {
		bad("postgres.statement_timeout", "must be at least 1ms")
	}
	s.StatementTimeout = cmp.Or(s.StatementTimeout, StatementTimeoutDefault)
	return s, errors.Join(errs...)
}

// idIsKey reports whether the fields.id mapping id makes the record id
// the key column's value.
func idIsKey(id, key string) bool {
	id = strings.TrimSpace(id)
	return id == "item."+key || id == "" && key == "id"
}

// tableIdent splits a table name (name or schema.name, each part plain or
// double-quoted) into an identifier.
func tableIdent(name string) (pgx.Identifier, error) {
	var parts []string
	rest := name
	for {
		var part string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			var b strings.Builder
			for end < len(rest) {
				if rest[end] == '"' {
					if end+1 < len(rest) && rest[end+1] == '"' {
						b.WriteByte('"')
						end += 2
						continue
					}
					break
				}
				b.WriteByte(rest[end])
				end++
			}
			if end >= len(rest) {
				return nil, errors.New("has an unclosed double quote: " + name)
			}
			part, rest = b.String(), rest[end+1:]
		} else {
			i := strings.IndexByte(rest, '.')
			if i < 0 {
				i = len(rest)
			}
			part, rest = rest[:i], rest[i:]
			if !identRE.MatchString(part) {
				return nil, errors.New(`must be a table name or schema.table (double-quote a name with other characters), not "` + name + `"`)
			}
			part = strings.ToLower(part) // as PostgreSQL folds unquoted names
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		if rest[0] != '.' || len(rest) == 1 {
			return nil, errors.New(`must be a table name or schema.table, not "` + name + `"`)
		}
		rest = rest[1:]
	}
	if len(parts) > 2 {
		return nil, errors.New(`must be a table name or schema.table, not "` + name + `"`)
	}
	return pgx.Identifier(parts), nil
}

func newFromSettings(src *config.Source, s *Settings, env connectors.Env) (connectors.Connector, error) {
	return New(Options{
		DSN: s.DSN, Table: s.Table, Query: s.Query, Key: s.Key, Cursor: s.Cursor, Lookback: s.Lookback,
		Snapshot: s.Snapshot, DeletedWhen: s.DeletedWhen, FullScanEvery: s.FullScanEvery, PageSize: s.PageSize, MaxPages: s.MaxPages,
		StatementTimeout: s.StatementTimeout, Timeout: src.Timeout, Source: src.Name,
		Errorf: src.Errorf, Dial: env.Dial, Logger: env.Logger, Now: env.Now,
	})
}
