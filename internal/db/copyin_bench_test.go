package db_test

import (
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/db"
)

// pageRow is a row shaped like a new record of the syncer's COPY.
type pageRow struct {
	source, id, hash, title, body, url, author, status string
	version                                            int32
	labels                                             []string
	created, updated                                   time.Time
	extra, raw                                         []byte
	run                                                int64
}

// pageRows are a page of 1,000 tickets as the syncer COPYs them.
func pageRows() []pageRow {
	rows := make([]pageRow, 1000)
	now := time.Now()
	for i := range rows {
		rows[i] = pageRow{source: "tickets", id: "12345", hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			title: "Ticket 1: printer on floor 3 is jammed again",
			body:  "Reported by the front desk. The printer shows error E12 and the tray is stuck; please check the rollers and replace the toner if needed.",
			url:   "https://tickets.example.com/t/1", author: "user1", status: "open", version: 1,
			labels: []string{"facilities", "floor-3"}, created: now, updated: now,
			extra: []byte(`{"assignee":"agent1","priority":3}`),
			raw:   []byte(`{"id":1,"title":"Ticket 1: printer on floor 3 is jammed again","url":"https://tickets.example.com/t/1","status":"open"}`),
			run:   7}
	}
	return rows
}

// BenchmarkCopyInPage encodes a page of records with db.CopyIn, read as
// pgconn reads it.
func BenchmarkCopyInPage(b *testing.B) {
	rows := pageRows()
	p := make([]byte, 65536-5)
	b.ReportAllocs()
	for b.Loop() {
		in := db.NewCopyIn(len(rows), func(i int, c *db.CopyIn) {
			r := &rows[i]
			c.Row(15)
			c.Text(r.source)
			c.Text(r.id)
			c.Int4(r.version)
			c.Text(r.hash)
			c.Text(r.title)
			c.Text(r.body)
			c.Text(r.url)
			c.Text(r.author)
			c.Text(r.status)
			c.TextArray(r.labels)
			c.TstzPtr(&r.created)
			c.TstzPtr(&r.updated)
			c.JSONB(r.extra)
			c.JSONB(r.raw)
			c.Int8Ptr(&r.run)
		})
		for {
			if _, err := in.Read(p); err == io.EOF {
				break
			}
		}
	}
}

// BenchmarkCopyPgxPage encodes the same page as pgx.CopyFrom does: each
// value through pgtype.Map.Encode, as the valuers the writer of changes
// handed pgx before db.CopyIn.
func BenchmarkCopyPgxPage(b *testing.B) {
	rows := pageRows()
	m := pgtype.NewMap()
	oids := []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.Int4OID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID,
		pgtype.TextOID, pgtype.TextOID, pgtype.TextArrayOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.JSONBOID,
		pgtype.JSONBOID, pgtype.Int8OID}
	values := make([]any, len(oids))
	buf := make([]byte, 0, 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for i := range rows {
			r := &rows[i]
			values[0], values[1], values[2], values[3] = text{P: &r.source}, text{P: &r.id}, int4{&r.version}, text{P: &r.hash}
			values[4], values[5], values[6], values[7], values[8] = text{P: &r.title}, text{P: &r.body}, text{P: &r.url}, text{P: &r.author}, text{P: &r.status}
			values[9], values[10], values[11], values[12], values[13], values[14] = textArray{&r.labels}, tstz{P: &r.created}, tstz{P: &r.updated}, r.extra, r.raw, int8{P: &r.run}
			for k, v := range values {
				buf = append(buf, 0, 0, 0, 0)
				var err error
				if buf, err = m.Encode(oids[k], pgtype.BinaryFormatCode, v, buf); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// text, int8, tstz, int4 and textArray are the valuers internal/changes
// gave pgx before db.CopyIn: one pointer in an interface each, nothing
// boxed.
type (
	text struct{ P *string }
	int8 struct{ P *int64 }
	tstz struct{ P *time.Time }
	int4 struct{ p *int32 }
)

func (t text) TextValue() (pgtype.Text, error)  { return pgtype.Text{String: *t.P, Valid: true}, nil }
func (i int8) Int64Value() (pgtype.Int8, error) { return pgtype.Int8{Int64: *i.P, Valid: true}, nil }
func (t tstz) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: *t.P, Valid: true}, nil
}

func (i int4) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*i.p), Valid: true}, nil
}

type textArray struct{ p *[]string }

func (a textArray) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(*a.p)), LowerBound: 1}}
}
func (a textArray) Index(i int) any { return text{P: &(*a.p)[i]} }
func (a textArray) IndexType() any  { return text{} }
