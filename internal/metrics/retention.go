package metrics

import "github.com/prometheus/client_golang/prometheus"

// pruned are the instruments of the retention pruner.
type pruned struct {
	rows       *prometheus.CounterVec
	partitions *prometheus.CounterVec
}

func (m *Metrics) initPruned(counter func(name, help string, labels ...string) *prometheus.CounterVec) {
	m.pruned.rows = counter("lookout_retention_rows_pruned_total",
		"Rows the retention pruner deleted one by one (in batches), by table.", "table")
	m.pruned.partitions = counter("lookout_retention_partitions_dropped_total",
		"Partitions the retention pruner dropped whole, by table.", "table")
}

// Pruned counts what one prune did to table: rows deleted in batches and
// partitions dropped whole. The table's series exist from its first prune,
// even when it deleted nothing.
func (m *Metrics) Pruned(table string, rows int64, partitions int) {
	if m == nil {
		return
	}
	m.pruned.rows.WithLabelValues(table).Add(float64(rows))
	m.pruned.partitions.WithLabelValues(table).Add(float64(partitions))
}
