package reconcile

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics is what the elected reconciler's passes show: how long
// they take, how much work each found, and how many of their parts failed
// (each is retried next pass).
type metrics struct {
	passSeconds prometheus.Histogram
	backlog     prometheus.Gauge
	campaigns   prometheus.Gauge
	errors      prometheus.Counter
	rollbacks   prometheus.Counter
	frozenDays  prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pacer_reconciler_pass_duration_seconds", Help: "Reconciler pass time (full passes and indexed ones).",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pacer_reconciler_backlog", Help: "Work items the last reconciler pass found: days to open or close, shards to settle, campaign-days run low (every campaign on a full pass).",
		}),
		campaigns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pacer_reconciler_campaigns", Help: "Campaigns the reconciler looks after.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pacer_reconciler_errors_total", Help: "Reconciler failures (a campaign, a shard or an index read); each is retried next pass.",
		}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pacer_ledger_rollbacks_total", Help: "Redis masters found with a write watermark behind the one recorded outside Redis: acknowledged writes lost (a restored backup, a lagging replica promoted).",
		}),
		frozenDays: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pacer_ledger_frozen_days", Help: "Campaign-days the reconciler froze after a rollback whose freeze has not ended.",
		}),
	}
}

func (m metrics) observe(start time.Time, backlog, campaigns int) {
	m.passSeconds.Observe(time.Since(start).Seconds())
	m.backlog.Set(float64(backlog))
	m.campaigns.Set(float64(campaigns))
}

// Collectors returns the reconciler's metrics, to register with the daemon's.
func (r *Reconciler) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.stats.passSeconds, r.stats.backlog, r.stats.campaigns, r.stats.errors,
		r.stats.rollbacks, r.stats.frozenDays}
}
