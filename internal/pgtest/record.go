package pgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
)

// RecordEnv names the environment variable that turns on the recording of
// the SQL lookout sends: when it holds a directory, every test process
// that links pgtest appends each distinct DML statement its non-test code
// sends (through any pool db.Open makes, the daemons run in process
// included) to a file of its own in that directory, and
// `go run ./internal/pgtest/recordsql` merges them into a release's
// statements file (docs/development.md, "Cutting a release"). Unset, nothing
// is installed and nothing is paid.
const RecordEnv = "LOOKOUT_RECORD_SQL"

func init() {
	dir := os.Getenv(RecordEnv)
	if dir == "" {
		return
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		panic(fmt.Sprintf("pgtest: %s=%s must name an existing directory (err: %v)", RecordEnv, dir, err))
	}
	db.SetTracer(&recorder{dir: dir, seen: map[[2]string]bool{}})
}

// recordedLine is one line of a process's recording (JSON lines): a
// statement as it will be checked, the function that sent it, or why it
// was left out.
type recordedLine struct {
	SQL  string `json:"sql"`
	From string `json:"from,omitempty"`
	Skip string `json:"skip,omitempty"`
}

// recorder is the pgx tracer of a recording process.
type recorder struct {
	dir string

	mu   sync.Mutex
	seen map[[2]string]bool // (sql, from) written already
	f    *os.File           // created at the first statement
	err  error              // the first write error, reported once
}

var (
	_ pgx.QueryTracer    = (*recorder)(nil)
	_ pgx.BatchTracer    = (*recorder)(nil)
	_ pgx.CopyFromTracer = (*recorder)(nil)
)

// TraceQueryStart records Query, QueryRow and Exec.
func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.record(data.SQL)
	return ctx
}

// TraceQueryEnd does nothing.
func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records every query of the batch, with the caller of
// SendBatch.
func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if data.Batch != nil {
		for _, q := range data.Batch.QueuedQueries {
			r.record(q.SQL)
		}
	}
	return ctx
}

// TraceBatchQuery does nothing (TraceBatchStart recorded the queries).
func (r *recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart records the COPY's table and columns as
// `COPY "table" ("a", "b") FROM STDIN`.
func (r *recorder) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	r.record(CopyStatement(data.TableName, data.ColumnNames))
	return ctx
}

// TraceCopyFromEnd does nothing.
func (r *recorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// CopyStatement is how a COPY FROM is written in a release's statements:
// the table and the columns pgx.CopyFrom was given.
func CopyStatement(table pgx.Identifier, columns []string) string {
	cols := make([]string, len(columns))
	for i, c := range columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	return fmt.Sprintf("COPY %s (%s) FROM STDIN", table.Sanitize(), strings.Join(cols, ", "))
}

// record writes each DML statement of sql sent by lookout's non-test code,
// once per (statement, sender).
func (r *recorder) record(sql string) {
	from, ok := sender()
	if !ok {
		return
	}
	for _, stmt := range SplitStatements(sql) {
		line := recordedLine{From: from}
		line.SQL, line.Skip = Normalize(stmt)
		if line.SQL == "" {
			continue
		}
		r.write(line)
	}
}

func (r *recorder) write(line recordedLine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [2]string{line.SQL, line.From}
	if r.seen[key] || r.err != nil {
		return
	}
	r.seen[key] = true
	if r.f == nil {
		// One file per process: parallel test binaries never write to
		// one file.
		r.f, r.err = os.CreateTemp(r.dir, "sql-*.jsonl")
		if r.err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %s: %v\n", RecordEnv, r.err)
			return
		}
	}
	b, err := json.Marshal(line)
	if err == nil {
		_, err = r.f.Write(append(b, '\n'))
	}
	if err != nil {
		r.err = fmt.Errorf("write %s: %w", r.f.Name(), err)
		fmt.Fprintf(os.Stderr, "pgtest: %s: %v\n", RecordEnv, r.err)
	}
}

const module = "github.com/lookout-dev/lookout/"

// sender finds the function that sent the statement: the first frame
// outside pgx, database/sql and the runtime. It reports false for SQL a
// test sends itself (a _test.go file, or a test-only package: the fixture
// or the assertion is not what a binary sends), for golang-migrate's own
// statements (its schema_migrations table is not lookout's schema), and
// for anything outside the module.
func sender() (string, bool) {
	var pcs [64]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		fn := f.Function
		switch {
		case strings.HasPrefix(fn, "github.com/jackc/"),
			strings.HasPrefix(fn, "database/sql."),
			strings.HasPrefix(fn, "runtime."),
			strings.HasPrefix(fn, module+"internal/pgtest."),
			fn == module+"internal/db.CopyFrom": // its caller sent the COPY
		default:
			if strings.HasSuffix(f.File, "_test.go") || !strings.HasPrefix(fn, module) {
				return "", false
			}
			name := strings.TrimPrefix(fn, module)
			if testOnly(pkgOf(name)) {
				return "", false
			}
			return name, true
		}
		if !more {
			return "", false
		}
	}
}

// pkgOf is the package path of a function name such as
// internal/outbox.(*Outbox).Enqueue.func1.
func pkgOf(fn string) string {
	slash := strings.LastIndex(fn, "/")
	if dot := strings.Index(fn[slash+1:], "."); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}

// testOnly reports whether pkg (module-relative) is linked by tests only:
// test helpers (pgtest, clitest, conntest, syncertest, the fake APIs), the
// end-to-end tests and the benchmarks.
func testOnly(pkg string) bool {
	last := pkg[strings.LastIndex(pkg, "/")+1:]
	switch {
	case strings.HasSuffix(last, "test"),
		pkg == "internal/e2e", pkg == "internal/bench", pkg == "cmd/lookout-bench",
		pkg == "internal/architecture", pkg == "deploy":
		return true
	}
	return false
}

var (
	// perTestSchema matches the schemas Schema makes (t_<test>_<8 hex>).
	perTestSchema = regexp.MustCompile(`\bt_[a-z0-9_]*_[0-9a-f]{8}\b`)
	// partition matches the weekly partitions internal/retention makes
	// (<table>_pYYYYMMDD).
	partition = regexp.MustCompile(`\b([a-z_]+)_p[0-9]{8}\b`)
	// notRecorded is the marker of a statement whose text is made from
	// the schema it runs on (its columns read from the catalog), so that
	// an older binary's text on a newer schema is not the recorded one.
	notRecorded = regexp.MustCompile(`/\* not recorded: ([^*]*)\*/`)
	// dml is the first keyword of a statement that reads or writes rows.
	dml = regexp.MustCompile(`(?i)^\(*\s*(select|insert|update|delete|with|merge|copy\s.*\sfrom\s+stdin$)\b`)
	// leadingComments are the comments before a statement's first keyword.
	leadingComments = regexp.MustCompile(`(?s)^(\s*(--[^\n]*\n|/\*.*?\*/))*\s*`)
)

// Normalize returns stmt as a release's statements file holds it: every
// line trimmed, empty lines dropped, no final semicolon; the weekly
// partitions internal/retention names (<table>_pYYYYMMDD, a name made per
// week) replaced by their parent table, which has the same columns. It
// returns "" for a statement that is not DML (DDL, SET, LISTEN, BEGIN, …:
// the rule is about what the binaries read and write), and a reason to skip
// one that names a per-test schema (it cannot be prepared in another; no
// statement of lookout's code does) or carries the marker
// `/* not recorded: <why> */` (a statement made from the schema it runs
// on, such as retention's move of rows with the columns it read from the
// catalog: an older binary makes it anew for a newer schema).
func Normalize(stmt string) (sql, skip string) {
	var lines []string
	for l := range strings.SplitSeq(stmt, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	sql = strings.TrimSpace(strings.TrimSuffix(strings.Join(lines, "\n"), ";"))
	body := leadingComments.ReplaceAllString(sql, "")
	if !dml.MatchString(body) {
		return "", ""
	}
	sql = partition.ReplaceAllString(sql, "$1")
	if m := notRecorded.FindStringSubmatch(sql); m != nil {
		return sql, strings.TrimSpace(m[1])
	}
	if perTestSchema.MatchString(sql) {
		return sql, "names a per-test schema"
	}
	return sql, ""
}

// SplitStatements splits what one Exec sent into its statements, at the
// semicolons outside quotes, dollar quotes and comments (the simple
// protocol, used by an Exec without arguments, takes several).
func SplitStatements(sql string) []string {
	var out []string
	start := 0
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(sql[i+1:], c)
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 1
			}
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 3
			}
		case c == '$':
			if m := dollarTag.FindString(sql[i:]); m != "" {
				j := strings.Index(sql[i+len(m):], m)
				if j < 0 {
					i = len(sql)
				} else {
					i += len(m) + j + len(m) - 1
				}
			}
		case c == ';':
			if s := strings.TrimSpace(sql[start:i]); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if start < len(sql) {
		if s := strings.TrimSpace(sql[start:]); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var dollarTag = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)
