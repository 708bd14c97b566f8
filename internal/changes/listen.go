package changes

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/db"
)

// Listen returns a listener on the change log's channel of schema
// (db.ChangesChannel): it wakes its consumer after every batch the writer
// commits (NotifySQL) and on every (re)connect, so that the consumer
// drains the changes table. Start and Stop it.
func Listen(pool *pgxpool.Pool, schema string, logger *slog.Logger) *db.Listener {
	return db.NewListener(pool, db.ChangesChannel(schema), logger)
}
