package postgres

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Native are the types whose Go values (pgx's) the connector writes as
// JSON itself; json, jsonb and numeric are read as text and written as
// they are (numbers stay exact); every other type is read as to_jsonb
// gives it (arrays, enums, uuid, interval, composite types).
var native = map[uint32]bool{
	pgtype.BoolOID: true, pgtype.Int2OID: true, pgtype.Int4OID: true, pgtype.Int8OID: true, pgtype.OIDOID: true,
	pgtype.TextOID: true, pgtype.VarcharOID: true, pgtype.BPCharOID: true, pgtype.NameOID: true,
	pgtype.Float4OID: true, pgtype.Float8OID: true,
	pgtype.TimestamptzOID: true, pgtype.TimestampOID: true, pgtype.DateOID: true, pgtype.ByteaOID: true,
}

// asText are the types read as their text.
var asText = map[uint32]bool{pgtype.JSONOID: true, pgtype.JSONBOID: true, pgtype.NumericOID: true}

// valueExpr is the select-list expression of col.
func valueExpr(col column) string {
	ref := alias + "." + quote(col.name)
	switch {
	case native[col.oid]:
		return ref
	case asText[col.oid]:
		return ref + "::text"
	}
	return "to_jsonb(" + ref + ")::text"
}

// rowJSON writes one row as a JSON object, its columns in order.
func rowJSON(cols []column, vals []any) (json.RawMessage, error) {
	b := make([]byte, 0, 64*len(cols))
	b = append(b, '{')
	for i, col := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		name, _ := json.Marshal(col.name)
		b = append(b, name...)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, col, vals[i]); err != nil {
			return nil, fmt.Errorf("column %s (%s): %w", col.name, col.typ, err)
		}
	}
	return append(b, '}'), nil
}

// appendValue appends v, the value pgx read of col, as JSON.
func appendValue(b []byte, col column, v any) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	if !native[col.oid] {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("read as %T, not text", v)
		}
		if col.oid == pgtype.NumericOID {
			switch s {
			case "NaN", "Infinity", "-Infinity":
				return strconv.AppendQuote(b, s), nil
			}
		}
		if !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("is not valid JSON: %.40q", s)
		}
		return append(b, s...), nil
	}
	switch x := v.(type) {
	case bool:
		return strconv.AppendBool(b, x), nil
	case int16:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case float32:
		return appendFloat(b, float64(x), 32), nil
	case float64:
		return appendFloat(b, x, 64), nil
	case string:
		s, err := json.Marshal(x)
		return append(b, s...), err
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, '"'), nil
	case time.Time:
		if col.oid == pgtype.DateOID {
			return strconv.AppendQuote(b, x.Format(time.DateOnly)), nil
		}
		return strconv.AppendQuote(b, x.UTC().Format(time.RFC3339Nano)), nil
	}
	// infinity dates and timestamps (pgtype.InfinityModifier) and the like.
	s, err := json.Marshal(fmt.Sprint(v))
	return append(b, s...), err
}

// appendFloat writes NaN and the infinities, which JSON has no number
// for, as strings.
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}
