package export

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the exporter's Prometheus series (docs/EXPORT.md lists them;
// configs/alerts/pacer-export.rules.yaml alerts on them).
type Metrics struct {
	Events     prometheus.Counter
	Duplicates prometheus.Counter
	Errors     *prometheus.CounterVec
	Gaps       *prometheus.CounterVec
	Trimmed    prometheus.Counter
	LagEntries prometheus.Gauge
	LagSeconds prometheus.Gauge
	Streams    prometheus.Gauge
	LastPass   prometheus.Gauge
}

// NewMetrics creates the series and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_export_events_total",
			Help: "Audit-stream entries written to PostgreSQL (ledger_events rows inserted)."}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_export_duplicates_total",
			Help: "Entries read again that PostgreSQL already held (redelivered after a crash, read by two exporters, replayed): skipped."}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_export_errors_total",
			Help: "Failed export steps, by stage (redis, sql, entry)."}, []string{"stage"}),
		Gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pacer_export_gaps_total",
			Help: "Stretches of an audit stream found gone before export (trimmed, missing) or a stream behind the export (behind), by kind."}, []string{"kind"}),
		Trimmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "pacer_export_trimmed_total",
			Help: "Exported audit-stream entries trimmed from Redis (XTRIM MINID)."}),
		LagEntries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pacer_export_lag_entries",
			Help: "Audit-stream entries not yet exported, at the start of the last pass."}),
		LagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pacer_export_lag_seconds",
			Help: "Age of the oldest audit-stream entry not yet exported, at the start of the last pass."}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pacer_export_streams",
			Help: "Audit streams (shards of campaign-days) the last pass looked at."}),
		LastPass: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pacer_export_last_pass_timestamp_seconds",
			Help: "When the last complete pass over every stream ended (Unix seconds)."}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Duplicates, m.Errors, m.Gaps, m.Trimmed, m.LagEntries, m.LagSeconds, m.Streams, m.LastPass)
	}
	return m
}
