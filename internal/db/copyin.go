package db

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// CopyIn is a COPY ... FROM STDIN in PostgreSQL's binary format for a
// writer that knows its columns' types: fill appends row i's values, one
// call per column in the order of the columns given to CopyFrom, and the
// rows are encoded as pgconn reads them (64 KB at a time).
//
// pgx.Conn.CopyFrom encodes each value through pgtype.Map, which looks up
// an encode plan for the value's Go type and the column's OID: two map
// lookups and interface calls per value, five times the cost of the
// bytes for a page of records, about 0.1 s of Go CPU per initial sync of
// 100,000 (docs/benchmarks.md "(1) and (4): COPY rows encoded by their
// writers"). The encodings here are PostgreSQL's send functions' (the
// same bytes pgx writes; TestCopyInMatchesPgx compares them row by row
// through a real server), and the protocol is pgconn's.
type CopyIn struct {
	rows, row int
	fill      func(i int, c *CopyIn)

	buf []byte // encoded and not yet read
	off int    // read up to here
	end bool   // the trailer is in buf
}

// NewCopyIn returns the COPY of n rows whose values fill appends.
func NewCopyIn(n int, fill func(i int, c *CopyIn)) *CopyIn {
	c := &CopyIn{rows: n, fill: fill, buf: (*copyBuffers.Get().(*[]byte))[:0]}
	c.buf = append(c.buf, copySignature...)
	c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // flags
	c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // header extension length
	return c
}

// copyBuffers are the buffers of CopyIns that were read to their end:
// each COPY of the syncer's pages and of the evaluator's decisions takes
// one, instead of making a chunk's worth of bytes.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, copyChunk+1024)
	return &b
}}

// copyChunk is what pgconn reads at a time (its buffer, less the
// message's header).
const copyChunk = 65536 - 5

// copySignature starts the binary COPY format.
const copySignature = "PGCOPY\n\377\r\n\000"

// Read implements io.Reader for pgconn.PgConn.CopyFrom: it encodes rows
// until p can be filled, and ends with the format's trailer.
func (c *CopyIn) Read(p []byte) (int, error) {
	if c.off > 0 && !c.end {
		// What the last read left (less than a row) moves to the front,
		// so that buf stays one chunk and a row long.
		c.buf = c.buf[:copy(c.buf, c.buf[c.off:])]
		c.off = 0
	}
	for len(c.buf)-c.off < len(p) && !c.end {
		if c.row < c.rows {
			c.fill(c.row, c)
			c.row++
			continue
		}
		c.buf = binary.BigEndian.AppendUint16(c.buf, math.MaxUint16) // -1: no more tuples
		c.end = true
	}
	if c.off == len(c.buf) {
		if c.buf != nil && cap(c.buf) <= 4*copyChunk { // not one a large row grew
			b := c.buf[:0]
			copyBuffers.Put(&b)
		}
		c.buf, c.off = nil, 0
		return 0, io.EOF
	}
	n := copy(p, c.buf[c.off:])
	c.off += n
	return n, nil
}

// Row starts a row of n values.
func (c *CopyIn) Row(n int) {
	c.buf = binary.BigEndian.AppendUint16(c.buf, uint16(n))
}

// Null appends NULL.
func (c *CopyIn) Null() {
	c.buf = binary.BigEndian.AppendUint32(c.buf, math.MaxUint32) // -1
}

// Text appends a text (or varchar) value: its bytes (textsend).
func (c *CopyIn) Text(s string) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(s)))
	c.buf = append(c.buf, s...)
}

// TextPtr appends *p, or NULL for nil.
func (c *CopyIn) TextPtr(p *string) {
	if p == nil {
		c.Null()
		return
	}
	c.Text(*p)
}

// Int4 appends an int4 value.
func (c *CopyIn) Int4(v int32) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 4)
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(v))
}

// Int8 appends an int8 value.
func (c *CopyIn) Int8(v int64) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 8)
	c.buf = binary.BigEndian.AppendUint64(c.buf, uint64(v))
}

// Bool appends a boolean value.
func (c *CopyIn) Bool(v bool) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 1)
	if v {
		c.buf = append(c.buf, 1)
	} else {
		c.buf = append(c.buf, 0)
	}
}

// Float8Ptr appends *p as a float8 value (its IEEE 754 bits), or NULL for
// nil.
func (c *CopyIn) Float8Ptr(p *float64) {
	if p == nil {
		c.Null()
		return
	}
	c.buf = binary.BigEndian.AppendUint32(c.buf, 8)
	c.buf = binary.BigEndian.AppendUint64(c.buf, math.Float64bits(*p))
}

// Int8Ptr appends *p as an int8 value, or NULL for nil.
func (c *CopyIn) Int8Ptr(p *int64) {
	if p == nil {
		c.Null()
		return
	}
	c.Int8(*p)
}

// microsecondsToY2K is the Unix time of 2000-01-01 00:00:00 UTC, in
// microseconds: binary timestamps count from there.
const microsecondsToY2K = 946684800 * 1000000

// TstzPtr appends *p as a timestamptz value (microseconds since
// 2000-01-01 UTC, the nanoseconds truncated as pgx does), or NULL for nil.
func (c *CopyIn) TstzPtr(p *time.Time) {
	if p == nil {
		c.Null()
		return
	}
	us := p.Unix()*1000000 + int64(p.Nanosecond())/1000
	c.buf = binary.BigEndian.AppendUint32(c.buf, 8)
	c.buf = binary.BigEndian.AppendUint64(c.buf, uint64(us-microsecondsToY2K))
}

// JSONB appends a jsonb value from JSON text (jsonb_send: version 1,
// then the text), or NULL for nil. PostgreSQL checks the text.
func (c *CopyIn) JSONB(js []byte) {
	if js == nil {
		c.Null()
		return
	}
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(js)+1))
	c.buf = append(c.buf, 1)
	c.buf = append(c.buf, js...)
}

// JSONBPtr is JSONB of *p's text, or NULL for nil.
func (c *CopyIn) JSONBPtr(p *string) {
	if p == nil {
		c.Null()
		return
	}
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(*p)+1))
	c.buf = append(c.buf, 1)
	c.buf = append(c.buf, *p...)
}

// TextArray appends a one-dimensional text[] of ss (array_send), or NULL
// for a nil slice; an empty slice is the empty array.
func (c *CopyIn) TextArray(ss []string) {
	if ss == nil {
		c.Null()
		return
	}
	at := len(c.buf)
	c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // the length, set below
	if len(ss) == 0 {
		c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // no dimensions
		c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // no NULLs
		c.buf = binary.BigEndian.AppendUint32(c.buf, pgtype.TextOID)
	} else {
		c.buf = binary.BigEndian.AppendUint32(c.buf, 1) // one dimension
		c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // no NULLs
		c.buf = binary.BigEndian.AppendUint32(c.buf, pgtype.TextOID)
		c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(ss)))
		c.buf = binary.BigEndian.AppendUint32(c.buf, 1) // lower bound
		for _, s := range ss {
			c.Text(s)
		}
	}
	binary.BigEndian.PutUint32(c.buf[at:], uint32(len(c.buf)-at-4))
}

// CopyStatement is the COPY of columns into table in the binary format.
func CopyStatement(table string, columns []string) string {
	cols := make([]string, len(columns))
	for i, col := range columns {
		cols[i] = pgx.Identifier{col}.Sanitize()
	}
	return fmt.Sprintf("COPY %s (%s) FROM STDIN BINARY", pgx.Identifier{table}.Sanitize(), strings.Join(cols, ", "))
}

// CopyFrom runs stmt (CopyStatement of table and columns) with c's rows on
// tx's connection and returns the rows copied. The connection's tracer
// sees it as a pgx.CopyFrom of table and columns.
func CopyFrom(ctx context.Context, tx pgx.Tx, table string, columns []string, stmt string, c *CopyIn) (int64, error) {
	conn := tx.Conn()
	tracer, _ := conn.Config().Tracer.(pgx.CopyFromTracer)
	if tracer != nil {
		ctx = tracer.TraceCopyFromStart(ctx, conn, pgx.TraceCopyFromStartData{TableName: pgx.Identifier{table}, ColumnNames: columns})
	}
	tag, err := conn.PgConn().CopyFrom(ctx, c, stmt)
	if tracer != nil {
		tracer.TraceCopyFromEnd(ctx, conn, pgx.TraceCopyFromEndData{CommandTag: tag, Err: err})
	}
	return tag.RowsAffected(), err
}
