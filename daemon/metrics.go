package daemon

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds what the loops and the socket server observe. SPEND counts
// are read from the buckets at scrape time, so a SPEND pays for no metric.
type metrics struct {
	spendSeconds  prometheus.Histogram
	ledgerSeconds *prometheus.HistogramVec
	leader        atomic.Bool
	lastStep      atomic.Int64 // unix nanos of the last completed refill round
	clockOffset   atomic.Int64 // nanos this host's clock is ahead of Redis TIME (CheckClock)
	clockMeasured atomic.Bool
}

func newMetrics() *metrics {
	return &metrics{
		spendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pacer_spend_duration_seconds", Help: "SPEND decision time, as the socket server saw it (sampled 1 in 64 per connection).",
			Buckets: prometheus.ExponentialBuckets(25e-9, 2, 14),
		}),
		ledgerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pacer_lease_call_duration_seconds", Help: "Ledger call latency by operation.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"op"}),
	}
}

func (d *Daemon) observeLedger(op string, start time.Time, err error) {
	d.metrics.ledgerSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	d.counters.ledgerCalls.Add(1)
	if err != nil {
		d.counters.ledgerErrors.Add(1)
	}
	d.opCounts.add(op, err != nil)
}

// opCounts counts ledger calls by operation and result without a map lock on
// the loop's path: the set of operations is fixed.
type opCounts struct {
	ok, failed [len(ledgerOps)]atomic.Int64
}

var ledgerOps = [...]string{"open", "grant", "renew", "release", "refresh", "read", "reassert", "demand", "watermark"}

func (o *opCounts) add(op string, failed bool) {
	i := slices.Index(ledgerOps[:], op)
	if i < 0 {
		return
	}
	if failed {
		o.failed[i].Add(1)
	} else {
		o.ok[i].Add(1)
	}
}

// ObserveSpend records one sampled SPEND's decision time (the socket server
// calls it; see transport.ServerConfig.ObserveSpend).
func (d *Daemon) ObserveSpend(took time.Duration) { d.metrics.spendSeconds.Observe(took.Seconds()) }

// SetLeader records whether this daemon's reconciler leads (for the gauge).
func (d *Daemon) SetLeader(leading bool) { d.metrics.leader.Store(leading) }

// LastStep returns when the refill loop last completed a round: the liveness
// that pacerd's systemd watchdog reports.
func (d *Daemon) LastStep() time.Time { return time.Unix(0, d.metrics.lastStep.Load()) }

// TopCampaigns bounds the per-campaign metrics: the campaigns with the most
// tokens plus reserve get their own series, the rest are summed as "_other".
const TopCampaigns = 20

var (
	descDecisions  = prometheus.NewDesc("pacer_spend_decisions_total", "SPEND answers by result.", []string{"result"}, nil)
	descTokens     = prometheus.NewDesc("pacer_campaign_tokens_micros", "Spendable micros in the campaign's bucket.", []string{"campaign"}, nil)
	descReserve    = prometheus.NewDesc("pacer_campaign_reserve_micros", "Leased micros not yet dripped into the bucket.", []string{"campaign"}, nil)
	descLeases     = prometheus.NewDesc("pacer_leases_held", "Leases this daemon holds.", nil, nil)
	descCalls      = prometheus.NewDesc("pacer_lease_calls_total", "Ledger calls by operation and result.", []string{"op", "result"}, nil)
	descErrors     = prometheus.NewDesc("pacer_ledger_errors_total", "Ledger calls that failed.", nil, nil)
	descLeader     = prometheus.NewDesc("pacer_reconciler_leader", "1 while this daemon runs the fleet's reconciler.", nil, nil)
	descLostWrites = prometheus.NewDesc("pacer_ledger_lost_writes_total",
		"Times this daemon found that the ledger lost writes it had acknowledged (a shard's history diverged or a held lease was forgotten); each froze the shard and re-asserted the leases held.", nil, nil)
	descReasserted = prometheus.NewDesc("pacer_leases_reasserted_total", "Held leases the ledger had forgotten and this daemon recorded again.", nil, nil)
	descUnbacked   = prometheus.NewDesc("pacer_refunds_unbacked_micros_total", "Refunded micros that could not go back into a bucket (their lease had closed).", nil, nil)
	descOffset     = prometheus.NewDesc("pacer_ledger_clock_offset_seconds", "This host's clock minus Redis TIME, as last measured (positive: ahead).", nil, nil)
	descRefusing   = prometheus.NewDesc("pacer_ledger_refusing_leases", "1 while the daemon takes no new lease: the ledger does not meet its durability policy, or this host's clock is beyond the skew bound.", nil, nil)

	descAuctionWindow = prometheus.NewDesc("pacer_auction_ids_window_seconds",
		"How far back every allowed auction id is remembered: the dedup window, or less once the memory bound made the oldest go. A retry or refund older than this may not be recognised.", nil, nil)
	descAuctionIDs   = prometheus.NewDesc("pacer_auction_ids_remembered", "Auction ids of allowed SPENDs the daemon remembers.", nil, nil)
	descAuctionBytes = prometheus.NewDesc("pacer_auction_ids_memory_bytes", "Memory held by remembered auction ids (bounded by dedup_memory_bytes).", nil, nil)
)

// Collector returns the daemon's Prometheus collector, for a registry of the
// caller's (no global registry).
func (d *Daemon) Collector() prometheus.Collector { return (*collector)(d) }

type collector Daemon

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descTokens, descReserve, descLeases, descCalls, descErrors, descLeader, descUnbacked,
		descLostWrites, descReasserted, descAuctionWindow, descAuctionIDs, descAuctionBytes, descOffset, descRefusing} {
		ch <- d
	}
	c.metrics.spendSeconds.Describe(ch)
	c.metrics.ledgerSeconds.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	d := (*Daemon)(c)
	counter := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), labels...)
	}
	dec := d.decisions()
	counter(descDecisions, dec.allowed, "allowed")
	counter(descDecisions, dec.paced, "paced")
	counter(descDecisions, dec.exhausted, "exhausted")
	counter(descDecisions, d.counters.spendErrors.Load(), "error")
	counter(descErrors, d.counters.ledgerErrors.Load())
	counter(descUnbacked, d.counters.refundsUnbacked.Load())
	counter(descLostWrites, d.counters.lostWrites.Load())
	counter(descReasserted, d.counters.leasesReasserted.Load())
	for i, op := range ledgerOps {
		counter(descCalls, d.opCounts.ok[i].Load(), op, "ok")
		counter(descCalls, d.opCounts.failed[i].Load(), op, "error")
	}
	var leader int64
	if d.metrics.leader.Load() {
		leader = 1
	}
	gauge(descLeader, leader)
	as := d.auctions.stats(d.cfg.Clock.Now())
	ch <- prometheus.MustNewConstMetric(descAuctionWindow, prometheus.GaugeValue, as.Window.Seconds())
	gauge(descAuctionIDs, int64(as.Remembered))
	gauge(descAuctionBytes, as.MemoryBytes)
	if d.metrics.clockMeasured.Load() {
		ch <- prometheus.MustNewConstMetric(descOffset, prometheus.GaugeValue, time.Duration(d.metrics.clockOffset.Load()).Seconds())
	}
	var refusing int64
	if d.ledgerRefusal(context.Background()) != nil {
		refusing = 1
	}
	gauge(descRefusing, refusing)

	type row struct {
		id              string
		tokens, reserve int64
	}
	var rows []row
	var leases int
	now := d.cfg.Clock.Now()
	for _, cp := range d.campaigns.all() {
		leases += cp.leaseCount()
		if ds := cp.day.Load(); ds != nil {
			st := ds.b.Stats(now)
			rows = append(rows, row{cp.id, st.Tokens, st.Reserve})
		}
	}
	gauge(descLeases, int64(leases))
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.tokens+b.reserve, a.tokens+a.reserve) })
	var other row
	for i, r := range rows {
		if i < TopCampaigns {
			gauge(descTokens, r.tokens, r.id)
			gauge(descReserve, r.reserve, r.id)
		} else {
			other.tokens += r.tokens
			other.reserve += r.reserve
		}
	}
	if len(rows) > TopCampaigns {
		gauge(descTokens, other.tokens, "_other")
		gauge(descReserve, other.reserve, "_other")
	}
	c.metrics.spendSeconds.Collect(ch)
	c.metrics.ledgerSeconds.Collect(ch)
}
