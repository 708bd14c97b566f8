// Package db opens lookout's PostgreSQL pool and applies its migrations.
//
// All tables live in the connection's current schema (search_path), so the
// channel names used for LISTEN/NOTIFY are qualified with that schema: two
// installations, or two tests, in one database never hear each other.
package db

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lookout-dev/lookout/migrations"
)

// URLFromEnv returns DATABASE_URL, or an error that tells the operator what
// to set.
func URLFromEnv() (string, error) {
	u := os.Getenv("DATABASE_URL")
	if u == "" {
		return "", errors.New("DATABASE_URL is not set (for example postgres://user@localhost:5432/lookout)")
	}
	return u, nil
}

// Open connects a pool to databaseURL and checks that the server answers.
func Open(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	return OpenSized(ctx, databaseURL, 0)
}

// OpenSized is Open with a pool of at least minConns connections (pgx's
// default is the larger of 4 and the number of CPUs), unless
// databaseURL's pool_max_conns says otherwise.
func OpenSized(ctx context.Context, databaseURL string, minConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, minConns)
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "lookout"
	}
	keepAlive(cfg.ConnConfig)
	if t := installedTracer(); t != nil && cfg.ConnConfig.Tracer == nil {
		cfg.ConnConfig.Tracer = t
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(databaseURL), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", redact(databaseURL), err)
	}
	return pool, nil
}

// tracer is what SetTracer installed.
var tracer struct {
	sync.Mutex
	t pgx.QueryTracer
}

// SetTracer installs t on the connections of every pool opened afterwards
// (nil removes it) and returns the tracer it replaces. t is a pgx QueryTracer and may also be a BatchTracer
// and a CopyFromTracer. It is for tests: internal/pgtest sets it to record
// the SQL lookout sends when LOOKOUT_RECORD_SQL is set (docs/development.md,
// "Cutting a release"); the binaries never call it.
func SetTracer(t pgx.QueryTracer) (previous pgx.QueryTracer) {
	tracer.Lock()
	defer tracer.Unlock()
	previous, tracer.t = tracer.t, t
	return previous
}

func installedTracer() pgx.QueryTracer {
	tracer.Lock()
	defer tracer.Unlock()
	return tracer.t
}

// Keepalive settings of every connection: a peer that stopped answering
// (a half-open connection, a frozen or unplugged machine) is found after
// about KeepAliveIdle + KeepAliveCount × KeepAliveInterval of silence,
// by this process and by the server, instead of the operating system's
// two hours. Data left unacknowledged ends a connection after
// TCPUserTimeout.
const (
	KeepAliveIdle     = 15 * time.Second
	KeepAliveInterval = 5 * time.Second
	KeepAliveCount    = 3
	TCPUserTimeout    = 30 * time.Second
)

// keepAlive sets TCP keepalives on both ends of cfg's connections: the
// client's dialer, and the server's (tcp_keepalives_*, tcp_user_timeout;
// ignored by the server on a Unix socket). Settings given in the URL win.
func keepAlive(cfg *pgx.ConnConfig) {
	dialer := &net.Dialer{
		Timeout: cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: KeepAliveIdle, Interval: KeepAliveInterval, Count: KeepAliveCount,
		},
	}
	cfg.DialFunc = dialer.DialContext
	for k, v := range map[string]string{
		"tcp_keepalives_idle":     strconv.Itoa(int(KeepAliveIdle.Seconds())),
		"tcp_keepalives_interval": strconv.Itoa(int(KeepAliveInterval.Seconds())),
		"tcp_keepalives_count":    strconv.Itoa(KeepAliveCount),
		"tcp_user_timeout":        strconv.FormatInt(TCPUserTimeout.Milliseconds(), 10),
	} {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
}

// CurrentSchema returns the schema that unqualified table names resolve to.
func CurrentSchema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("read current schema: %w", err)
	}
	return schema, nil
}

// ChangesChannel is the NOTIFY channel the syncer signals after committing
// changes in schema. It is also computed in SQL as current_schema() || '.changes'.
func ChangesChannel(schema string) string { return schema + ".changes" }

// Migrate applies every pending migration to the pool's current schema.
// It returns the resulting version. A database left dirty by a failed
// migration is refused with instructions instead of being touched; a
// schema newer than this binary is left as it is and its version returned
// (greater than LatestVersion), so that an old pod restarting during a
// rolling upgrade comes back. On a database with the citus extension it
// then lays the schema out for Citus (Distribute).
func Migrate(ctx context.Context, pool *pgxpool.Pool) (uint, error) {
	m, closeFn, err := newMigrator(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer closeFn()
	latest, err := LatestVersion()
	if err != nil {
		return 0, err
	}
	// A schema migrated past this binary (a newer release's migrate Job ran
	// while this pod restarts during a rolling upgrade) is used as it is:
	// migrations are backward compatible for one release. m.Up would fail
	// with "no migration found" since the newer files are not embedded.
	if cur, dirty, err := m.Version(); err == nil && !dirty && cur > latest {
		return cur, nil
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		var dirty migrate.ErrDirty
		if errors.As(err, &dirty) {
			return 0, fmt.Errorf("database schema is dirty at version %d (a migration failed half-way): fix the schema by hand, then run `migrate --force %d`: %w", dirty.Version, dirty.Version-1, err)
		}
		return 0, fmt.Errorf("apply migrations: %w", err)
	}
	if _, err := Distribute(ctx, pool); err != nil {
		return 0, fmt.Errorf("lay the schema out on citus: %w", err)
	}
	v, _, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("read migration version: %w", err)
	}
	return v, nil
}

// MigrateTo migrates the pool's current schema up or down to version (the
// down migrations of the later versions run, newest first). It returns the
// resulting version.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version uint) (uint, error) {
	m, closeFn, err := newMigrator(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer closeFn()
	if err := m.Migrate(version); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return 0, fmt.Errorf("migrate to version %d: %w", version, err)
	}
	v, _, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("read migration version: %w", err)
	}
	return v, nil
}

// MigrationStatus reports the applied version, whether it is dirty, and the
// newest version embedded in this binary.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool) (current uint, dirty bool, latest uint, err error) {
	m, closeFn, err := newMigrator(ctx, pool)
	if err != nil {
		return 0, false, 0, err
	}
	defer closeFn()
	current, dirty, err = m.Version()
	if err != nil && !errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, 0, fmt.Errorf("read migration version: %w", err)
	}
	latest, err = LatestVersion()
	return current, dirty, latest, err
}

// Force sets the recorded migration version without running anything; it is
// the documented way out of a dirty state after a manual fix.
func Force(ctx context.Context, pool *pgxpool.Pool, version int) error {
	m, closeFn, err := newMigrator(ctx, pool)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := m.Force(version); err != nil {
		return fmt.Errorf("force migration version %d: %w", version, err)
	}
	return nil
}

// LatestVersion is the highest migration version embedded in the binary.
func LatestVersion() (uint, error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	for {
		next, err := src.Next(v)
		if err != nil {
			return v, nil
		}
		v = next
	}
}

func newMigrator(ctx context.Context, pool *pgxpool.Pool) (*migrate.Migrate, func(), error) {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return nil, nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	// golang-migrate wants a *sql.DB; give it one over a connection config
	// equal to the pool's so that search_path and credentials match.
	sqlDB := stdlib.OpenDB(*pool.Config().ConnConfig.Copy())
	schema, err := CurrentSchema(ctx, pool)
	if err != nil {
		sqlDB.Close()
		return nil, nil, err
	}
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{
		MigrationsTable: "schema_migrations",
		SchemaName:      schema,
	})
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("open migration driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("create migrator: %w", err)
	}
	return m, func() { m.Close() }, nil
}

// redact removes the password from a database URL for error messages.
func redact(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// A keyword/value DSN ("host=… password=…") is not a URL: name
		// what is safe to name.
		cfg, err := pgconn.ParseConfig(databaseURL)
		if err != nil {
			return "the database"
		}
		return fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
	}
	return u.Redacted()
}

// Quote returns the identifier quoted for SQL.
func Quote(ident string) string { return pgx.Identifier{ident}.Sanitize() }
