package reconcile

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics is what the elected reconciler's passes show: how long
// they take and what they cost Redis, by kind (the full pass, the steps),
// how much work each found, how far the full pass has got, how many of
// their parts failed (each is retried next pass), and the election's
// session.
type metrics struct {
	passSeconds  *prometheus.HistogramVec
	passCommands *prometheus.HistogramVec
	passProgress prometheus.Gauge
	fullPasses   prometheus.Counter
	termsLost    prometheus.Counter
	sessionTTL   prometheus.Gauge
	backlog      prometheus.Gauge
	campaigns    prometheus.Gauge
	errors       prometheus.Counter
	rollbacks    prometheus.Counter
	frozenDays   prometheus.Gauge
}

// Pass kinds, the kind label's values.
const (
	passFull = "full"
	passStep = "step"
)

func newMetrics() metrics {
	return metrics{
		passSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pacer_reconciler_pass_duration_seconds", Help: "Reconciler pass time, by kind: full (a term's full pass, possibly resumed) or step (the indexed pass every interval).",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 18),
		}, []string{"kind"}),
		passCommands: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pacer_reconciler_pass_commands", Help: "Redis commands a reconciler pass sent (a pipeline's one by one), by kind: full or step.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 12),
		}, []string{"kind"}),
		passProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pacer_reconciler_full_pass_progress_ratio", Help: "How far the current (or last) full reconciler pass got through the campaigns, 0 to 1.",
		}),
		fullPasses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pacer_reconciler_full_passes_total", Help: "Full reconciler passes that reached the last campaign.",
		}),
		termsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pacer_reconciler_terms_lost_total", Help: "Reconciler terms this daemon lost because its election session ended (etcd unreachable, or renewals not sent within election.ttl); the log says which.",
		}),
		sessionTTL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pacer_reconciler_election_session_ttl_seconds", Help: "Seconds left on the leading reconciler's etcd election session as etcd last said (sampled every interval; 0 when not leading): near election.ttl while renewals reach etcd, falling towards 0 before a term is lost.",
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pacer_reconciler_backlog", Help: "Work items the last reconciler step found: days to open or close, shards to settle, campaign-days run low (the campaigns left, on a full pass).",
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

// observe records a pass of kind that began at start; backlog counts for
// steps only.
func (m metrics) observe(kind string, start time.Time, commands int64, backlog, campaigns int) {
	m.passSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	m.passCommands.WithLabelValues(kind).Observe(float64(commands))
	if kind == passStep {
		m.backlog.Set(float64(backlog))
	}
	m.campaigns.Set(float64(campaigns))
}

// Collectors returns the reconciler's metrics, to register with the daemon's.
func (r *Reconciler) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.stats.passSeconds, r.stats.passCommands, r.stats.passProgress, r.stats.fullPasses, r.stats.termsLost, r.stats.sessionTTL,
		r.stats.backlog, r.stats.campaigns, r.stats.errors, r.stats.rollbacks, r.stats.frozenDays}
}
