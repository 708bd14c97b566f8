package db_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func hasCitus(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var citus bool
	if err := pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		t.Fatal(err)
	}
	return citus
}

// On plain PostgreSQL, Distribute reports that there is no Citus and
// leaves the schema alone; on Citus (make test-citus) the migrated schema
// is laid out as CitusLayout says, and a second run changes nothing.
func TestDistributeLaysOutTheSchemaOnCitusOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t) // migrated: on Citus, distributed already
	ctx := context.Background()
	citus := hasCitus(t, pool)
	got, err := db.Distribute(ctx, pool)
	if err != nil {
		t.Fatalf("Distribute a second time: %v", err)
	}
	if got != citus {
		t.Fatalf("Distribute reported citus = %t on a database where the extension's presence is %t", got, citus)
	}
	if !citus {
		// The keys are the plain layout's: no source appended.
		var cols []string
		if err := pool.QueryRow(ctx, `SELECT array(SELECT a.attname::text FROM pg_constraint c, unnest(c.conkey) k(n)
			JOIN pg_attribute a ON a.attnum = k.n WHERE a.attrelid = c.conrelid AND c.conrelid = 'changes'::regclass AND c.contype = 'p')`).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		if len(cols) == 0 || slices.Contains(cols, "source") {
			t.Errorf("changes' primary key on plain PostgreSQL = %v, want it without source", cols)
		}
		return
	}
	schema, err := db.CurrentSchema(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]int{}
	for _, want := range db.CitusLayout {
		rel := db.Quote(schema) + "." + db.Quote(want.Name)
		var method, model, column string
		var colocation int
		err := pool.QueryRow(ctx, `
			SELECT partmethod::text, repmodel::text, coalesce(column_to_column_name(logicalrelid, partkey), ''), colocationid
			FROM pg_dist_partition WHERE logicalrelid = $1::regclass`, rel).Scan(&method, &model, &column, &colocation)
		if err != nil {
			t.Errorf("%s: not in pg_dist_partition: %v", want.Name, err)
			continue
		}
		switch {
		case want.Column == "" && (method != "n" || model != "t"):
			t.Errorf("%s: partition method %q, replication model %q, want a reference table", want.Name, method, model)
		case want.Column != "" && (method != "h" || column != want.Column):
			t.Errorf("%s: partition method %q by %q, want distributed by %s", want.Name, method, column, want.Column)
		}
		if want.Column == "" {
			continue
		}
		groups[want.Name] = colocation
		if want.ColocateWith != "none" && groups[want.ColocateWith] != colocation {
			t.Errorf("%s: co-location group %d, want %s's (%d)", want.Name, colocation, want.ColocateWith, groups[want.ColocateWith])
		}
		if want.ColocateWith == "none" {
			for other, g := range groups {
				if other != want.Name && g == colocation {
					t.Errorf("%s: shares co-location group %d with %s, want a group of its own", want.Name, colocation, other)
				}
			}
		}
		// Every primary key and unique constraint holds the distribution column.
		var missing []string
		if err := pool.QueryRow(ctx, `
			SELECT array(SELECT c.conname::text FROM pg_constraint c
			             WHERE c.conrelid = $1::regclass AND c.contype IN ('p', 'u')
			               AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.conrelid
			                               AND a.attname = $2 AND a.attnum = ANY (c.conkey)))`,
			rel, want.Column).Scan(&missing); err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 {
			t.Errorf("%s: keys without %s: %v", want.Name, want.Column, missing)
		}
	}
	// The definitions' tables keep their xid8 triggers, on the coordinator.
	for _, name := range db.CitusCoordinatorTables {
		rel := db.Quote(schema) + "." + db.Quote(name)
		var distributed, triggers bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass),
			EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal)`, rel).Scan(&distributed, &triggers); err != nil {
			t.Fatal(err)
		}
		if distributed || (!triggers && name != "config_version") { // config_version has no trigger
			t.Errorf("%s: in Citus' metadata %t, triggers %t; want a local table of the coordinator with its triggers", name, distributed, triggers)
		}
	}
}

// Every table a migration makes has a place on Citus, decided and written
// down: distributed or a reference table (CitusLayout), or a local table
// of the coordinator (CitusCoordinatorTables, CitusLocalTables), and only
// one. A new table missing from every list would stay local by accident,
// and a statement joining it with a distributed table would fail on
// Citus only.
func TestEveryTableHasACitusPlace(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT c.relname::text FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	places := map[string][]string{}
	for _, l := range db.CitusLayout {
		places[l.Name] = append(places[l.Name], "CitusLayout")
	}
	for _, name := range db.CitusCoordinatorTables {
		places[name] = append(places[name], "CitusCoordinatorTables")
	}
	for _, name := range db.CitusLocalTables {
		places[name] = append(places[name], "CitusLocalTables")
	}
	for _, name := range tables {
		switch p := places[name]; len(p) {
		case 0:
			t.Errorf("table %s is in none of db.CitusLayout, db.CitusCoordinatorTables and db.CitusLocalTables: decide where it goes on Citus (docs/scaling.md)", name)
		case 1:
		default:
			t.Errorf("table %s is in %v: one place only", name, p)
		}
	}
	for name := range places {
		if !slices.Contains(tables, name) {
			t.Errorf("%s is listed for Citus but the migrations make no such table", name)
		}
	}
}
