package db_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// copyRow is a row of copyColumns.
type copyRow struct {
	t      *string
	i4     int32
	i8     *int64
	ts     *time.Time
	js     []byte
	arr    []string
	jsText *string
}

var copyColumns = []string{"t", "i4", "i8", "ts", "js", "arr", "js2"}

const copyTable = `(n int, t text, i4 int4, i8 int8, ts timestamptz, js jsonb, arr text[], js2 jsonb)`

// copyRows are the values the writers hand over, with their edges: NULLs,
// empty text and arrays, escapes and multibyte text, times before 1970
// and 2000 and with nanoseconds, extreme integers, a value larger than a
// chunk of the protocol, and enough rows to span many chunks.
func copyRows() []copyRow {
	p := func(s string) *string { return &s }
	i := func(v int64) *int64 { return &v }
	tm := func(v time.Time) *time.Time { return &v }
	rows := []copyRow{
		{},
		{t: p(""), i4: -1, i8: i(0), ts: tm(time.Unix(0, 0)), js: []byte(`{}`), arr: []string{}, jsText: p(`[]`)},
		{t: p("héllo \"wörld\" \\ {a,b} 🙂"), i4: 2147483647, i8: i(-9223372036854775808), ts: tm(time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.UTC)),
			js: []byte(`{"a": [1, 2.5, "x"], "b": null, "id": 9007199254740993}`), arr: []string{"", "a,b", `q"uote`, "NULL", "é"}, jsText: p(`"s"`)},
		{t: p("x"), i4: -2147483648, i8: i(9223372036854775807), ts: tm(time.Date(1901, 3, 4, 5, 6, 7, 123456789, time.FixedZone("x", -7*3600))),
			js: []byte(`null`), arr: []string{"one"}},
		{t: p(strings.Repeat("long ", 40000)), ts: tm(time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC)), arr: []string{strings.Repeat("é", 70000)}},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		row := copyRow{t: p(strings.Repeat("ab", r.IntN(300))), i4: r.Int32(), ts: tm(time.Unix(r.Int64N(4e9)-2e9, r.Int64N(1e9)))}
		if n%3 == 0 {
			row.i8 = i(r.Int64())
			row.js = []byte(`{"n": ` + strings.Repeat("1", 1+r.IntN(15)) + `}`)
		}
		if n%5 != 0 {
			row.arr = make([]string, r.IntN(70))
			for k := range row.arr {
				row.arr[k] = strings.Repeat("z", r.IntN(20))
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// TestCopyInMatchesPgx copies the same rows with db.CopyIn and with
// pgx.CopyFrom into two tables, and the server finds them equal, row by
// row and column by column.
func TestCopyInMatchesPgx(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	rows := copyRows()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, name := range []string{"copy_in", "copy_pgx"} {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE `+name+` `+copyTable); err != nil {
			t.Fatal(err)
		}
	}
	cols := append([]string{"n"}, copyColumns...)
	in := db.NewCopyIn(len(rows), func(i int, c *db.CopyIn) {
		r := &rows[i]
		c.Row(len(cols))
		c.Int4(int32(i))
		c.TextPtr(r.t)
		c.Int4(r.i4)
		c.Int8Ptr(r.i8)
		c.TstzPtr(r.ts)
		c.JSONB(r.js)
		c.TextArray(r.arr)
		c.JSONBPtr(r.jsText)
	})
	n, err := db.CopyFrom(ctx, tx, "copy_in", cols, db.CopyStatement("copy_in", cols), in)
	if err != nil || n != int64(len(rows)) {
		t.Fatalf("CopyIn: %d rows, %v; want %d", n, err, len(rows))
	}
	src := pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := &rows[i]
		var js, arr, js2 any
		if r.js != nil {
			js = string(r.js)
		}
		if r.arr != nil {
			arr = r.arr
		}
		if r.jsText != nil {
			js2 = *r.jsText
		}
		return []any{int32(i), r.t, r.i4, r.i8, r.ts, js, arr, js2}, nil
	})
	if n, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_pgx"}, cols, src); err != nil || n != int64(len(rows)) {
		t.Fatalf("pgx.CopyFrom: %d rows, %v", n, err)
	}
	var differ, nulls, empties int
	err = tx.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE p.n IS NULL OR i.n IS NULL
		                           OR (i.t, i.i4, i.i8, i.ts, i.js, i.arr, i.js2) IS DISTINCT FROM (p.t, p.i4, p.i8, p.ts, p.js, p.arr, p.js2)
		                           OR array_dims(i.arr) IS DISTINCT FROM array_dims(p.arr)),
		       count(*) FILTER (WHERE i.t IS NULL AND i.arr IS NULL AND i.ts IS NULL),
		       count(*) FILTER (WHERE i.arr = '{}')
		FROM copy_in i FULL JOIN copy_pgx p USING (n)`).Scan(&differ, &nulls, &empties)
	if err != nil {
		t.Fatal(err)
	}
	if differ != 0 {
		t.Errorf("%d of %d rows differ between CopyIn and pgx.CopyFrom", differ, len(rows))
	}
	if nulls != 1 || empties == 0 {
		t.Errorf("the edges did not arrive: %d rows of NULLs (want 1), %d empty arrays", nulls, empties)
	}
	var big int
	if err := tx.QueryRow(ctx, `SELECT length(t) + length(arr[1]) FROM copy_in WHERE n = 4`).Scan(&big); err != nil || big != 270000 {
		t.Errorf("the row larger than a chunk: %d characters, %v; want 270000", big, err)
	}
}

// A value PostgreSQL refuses fails the COPY with the server's error, and
// the rows before it are not written.
func TestCopyInRefusedValue(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE copy_bad (n int, js jsonb)`); err != nil {
		t.Fatal(err)
	}
	cols := []string{"n", "js"}
	in := db.NewCopyIn(3, func(i int, c *db.CopyIn) {
		c.Row(2)
		c.Int4(int32(i))
		if i == 2 {
			c.JSONB([]byte(`{"unterminated`))
		} else {
			c.JSONB([]byte(`{}`))
		}
	})
	_, err = db.CopyFrom(ctx, tx, "copy_bad", cols, db.CopyStatement("copy_bad", cols), in)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22P02" || !strings.Contains(pgErr.Where, "column js") {
		t.Fatalf("err = %v, want invalid_text_representation in column js", err)
	}
}

// CopyIn encodes rows as pgconn reads them: however many rows there are,
// its buffer holds a chunk and a row, and the bytes read are the whole
// COPY (signature, rows, trailer).
func TestCopyInBuffersAChunk(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("b", 700)
	in := db.NewCopyIn(20_000, func(i int, c *db.CopyIn) {
		c.Row(2)
		c.Int4(int32(i))
		c.Text(body)
	})
	p := make([]byte, 65536-5) // what pgconn reads at a time
	total, most := 0, 0
	for {
		n, err := in.Read(p)
		total += n
		most = max(most, in.Buffered())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	row := 2 + 4 + 4 + 4 + len(body)
	if want := 11 + 8 + 20_000*row + 2; total != want {
		t.Errorf("read %d bytes, want %d", total, want)
	}
	if most > 2*len(p) {
		t.Errorf("the buffer grew to %d bytes for reads of %d (rows of %d)", most, len(p), row)
	}
}

// A CopyIn read past its end keeps answering io.EOF, and its buffer goes
// back to be reused once: the next COPY starts from an empty buffer.
func TestCopyInReadPastTheEnd(t *testing.T) {
	t.Parallel()
	in := db.NewCopyIn(1, func(i int, c *db.CopyIn) {
		c.Row(1)
		c.Text("x")
	})
	p := make([]byte, 64)
	n, err := in.Read(p)
	if want := 11 + 8 + 2 + 4 + 1 + 2; n != want || err != nil {
		t.Fatalf("first read: %d bytes, %v; want %d", n, err, want)
	}
	for range 3 {
		if n, err := in.Read(p); n != 0 || err != io.EOF {
			t.Fatalf("read past the end: %d bytes, %v", n, err)
		}
	}
	next := db.NewCopyIn(0, nil)
	if n, err := next.Read(p); n != 11+8+2 || err != nil {
		t.Fatalf("the next COPY read %d bytes, %v; want its header and trailer alone", n, err)
	}
}
