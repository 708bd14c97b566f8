package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func (m *Metrics) initConfig(counter func(name, help string, labels ...string) *prometheus.CounterVec) {
	m.configReloads = counter("lookout_config_reloads_total",
		"Reloads of the configuration directory (file change or SIGHUP), by outcome: applied, unchanged, refused.", "outcome")
	m.configLastReload = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lookout_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last load of the configuration directory that was valid and applied (the start counts)."})
	m.configVersion = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lookout_config_version",
		Help: "The definitions' config version this process runs with (config_version.version)."})
	m.reg.MustRegister(m.configLastReload, m.configVersion)
}

// ConfigReload counts a reload of the configuration directory: applied
// (valid, definitions changed), unchanged (valid, nothing to change) or
// refused (invalid: the running configuration stays).
func (m *Metrics) ConfigReload(outcome string, at time.Time) {
	if m == nil {
		return
	}
	m.configReloads.WithLabelValues(outcome).Inc()
	if outcome != "refused" {
		m.configLastReload.Set(float64(at.UnixNano()) / 1e9)
	}
}

// InitConfig makes the reload counters appear at 0 before the first reload.
func (m *Metrics) InitConfig() {
	if m == nil {
		return
	}
	for _, o := range []string{"applied", "unchanged", "refused"} {
		m.configReloads.WithLabelValues(o)
	}
}

// ConfigVersion sets the config version the process runs with.
func (m *Metrics) ConfigVersion(v int64) {
	if m == nil {
		return
	}
	m.configVersion.Set(float64(v))
}
