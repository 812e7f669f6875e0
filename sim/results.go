package sim

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

// Results are a run's figures; docs/SIMULATION.md defines each.
type Results struct {
	Scenario       string         `json:"scenario"`
	Seed           uint64         `json:"seed"`
	Date           string         `json:"date"`
	Start          time.Time      `json:"start"`
	End            time.Time      `json:"end"`
	SimulatedHours float64        `json:"simulated_hours"`
	WarmupHours    float64        `json:"warmup_hours,omitempty"` // simulated before Start, not counted
	WallSeconds    float64        `json:"wall_seconds"`
	Hosts          []HostResult   `json:"hosts"`
	Daemon         DaemonSettings `json:"daemon"`
	BaselineThin   int            `json:"baseline_thin"`
	Strategies     []string       `json:"strategies"`
	// Summary is per strategy, over every campaign it ran on.
	Summary   map[string]*Summary `json:"summary"`
	Campaigns []*CampaignResult   `json:"campaigns"`
	Redis     RedisCounts         `json:"redis"`
	Faults    []FaultRecord       `json:"faults,omitempty"`
	Notes     []string            `json:"notes,omitempty"`
	// ConservationOK: lease.Ledger.CheckDay found no problem on any
	// campaign-day at the end of the run.
	ConservationOK bool `json:"conservation_ok"`
	// Violations are the pacing invariants the run broke (invariants.go),
	// by pacer's spend; none in a good run.
	Violations []Violation `json:"violations"`
}

// DaemonSettings are the daemon's lease timings in the run.
type DaemonSettings struct {
	LeaseWindow string `json:"lease_window"`
	SkewBound   string `json:"skew_bound"`
	Grace       string `json:"grace"`
	CapWindow   string `json:"cap_window"`
	BurstWindow string `json:"burst_window"`
	Step        string `json:"step"`
	ArrivalTick string `json:"arrival_tick"`
}

// HostResult is one host's traffic and what pacer allowed it.
type HostResult struct {
	Name          string  `json:"name"`
	Weight        float64 `json:"weight"`
	Killed        bool    `json:"killed"`
	Spends        int64   `json:"spends"`
	AllowedMicros int64   `json:"allowed_micros"`
	// Daemon is the host's daemon's lease and ledger counters at the end
	// (its INFO: ledger_calls, leases_granted, ...; nil for a killed host).
	Daemon map[string]string `json:"daemon,omitempty"`
}

// RedisCounts are the commands each strategy sent to Redis over the run.
type RedisCounts struct {
	Pacer      int64 `json:"pacer"`
	Reconciler int64 `json:"reconciler"`
	Lua        int64 `json:"lua"`
	Batch      int64 `json:"batch"`
	// FailedWhilePaused were refused by the fault schedule's Redis pause.
	FailedWhilePaused int64 `json:"failed_while_paused"`
}

// FaultRecord is a fault as applied.
type FaultRecord struct {
	At         time.Time `json:"at"`
	Offset     string    `json:"offset"`
	What       string    `json:"what"`
	HeldMicros int64     `json:"held_micros,omitempty"`
}

// Quality is one strategy's figures for one campaign.
type Quality struct {
	BudgetMicros    int64   `json:"budget_micros"`
	Spends          int64   `json:"spends"`
	SpentMicros     int64   `json:"spent_micros"`
	OverspendMicros int64   `json:"overspend_micros"`
	Utilisation     float64 `json:"utilisation"`
	TrackingMax     float64 `json:"tracking_error_max"`
	TrackingRMS     float64 `json:"tracking_error_rms"`
	Smoothness      float64 `json:"smoothness_cv"`
	RedisCommands   int64   `json:"redis_commands"`
	CmdsPer1000     float64 `json:"redis_cmds_per_1000_spends"`
	// LastHourShare is the share of the budget spent in the local day's
	// last hour (the under-delivery-versus-burst question).
	LastHourShare float64 `json:"last_hour_share"`
	// LastHourRatio is LastHourShare over the curve's share of the last
	// hour: above 1, the day ends in a burst.
	LastHourRatio float64 `json:"last_hour_ratio"`
	// MaxHourRatio is the largest ratio, over the hours of the local day
	// with a plan, of the share spent in the hour to the curve's share of
	// it; MaxHourRatioBid the same after taking one largest bid off each
	// hour (a budget of 20 bids cannot put less than one bid in an hour).
	MaxHourRatio    float64 `json:"max_hour_ratio"`
	MaxHourRatioBid float64 `json:"max_hour_ratio_less_a_bid"`
	// HourShares and PlanHourShares are, per hour of the local day, the
	// share of the budget spent and the curve's share: the series behind
	// the hour ratios, for reading a run rather than a single figure.
	HourShares     []float64 `json:"hour_shares,omitempty"`
	PlanHourShares []float64 `json:"plan_hour_shares,omitempty"`
	// CmdsPerHour is Redis commands per hour of the campaign's day.
	CmdsPerHour float64 `json:"redis_cmds_per_hour"`
	// HostShareMaxDev is the largest gap, in points, between a host's share
	// of the spend and its share of the demand (pacer only).
	HostShareMaxDev float64 `json:"host_share_max_dev_points"`
	// HostShares and HostRequestShares are, per host, its share of the
	// spend and of the SPENDs it was asked (pacer only): the figures behind
	// HostShareMaxDev, whose demand share is the host's weight.
	HostShares        []float64 `json:"host_shares,omitempty"`
	HostRequestShares []float64 `json:"host_request_shares,omitempty"`
	// HostShareAskedDev is the largest gap, in points, between a host's
	// share of the spend and its share of the SPENDs it was asked (the day's
	// draw of the demand rather than its expectation); HostShareNoise, the
	// sampling error of a host's share of the spend given the SPENDs allowed
	// (the largest binomial standard deviation over the hosts, in points):
	// a 20-bid campaign's is about 9, and no split can be judged to 3 points
	// through it.
	HostShareAskedDev float64 `json:"host_share_asked_dev_points"`
	HostShareNoise    float64 `json:"host_share_noise_points"`
	// DemandAsked is what the day's SPENDs asked for, allowed or not, over
	// the budget (pacer only): the day's draw of the demand. A 20-bid budget
	// at 1.5x is asked about 30 SPENDs, and a day of 21 (1.6 standard
	// deviations short, one day in twenty) asks about its budget and no more.
	DemandAsked float64 `json:"demand_asked"`
}

// CampaignResult is one campaign's figures, per strategy, and its ledger.
type CampaignResult struct {
	ID        string  `json:"id"`
	Curve     string  `json:"curve"`
	TZ        string  `json:"tz"`
	Traffic   string  `json:"traffic"`
	Rate      float64 `json:"rate_per_second"`
	Demand    float64 `json:"demand"`
	Hot       bool    `json:"hot"`
	Baselines bool    `json:"baselines"`
	// Bids is the budget in mean bids; Reachable, whether the traffic can
	// follow the curve: in every hour of the day, demand x the hour's share
	// of the traffic is at least the curve's share of it.
	Bids      float64 `json:"bids"`
	Reachable bool    `json:"reachable"`
	// OracleUtilisation is what the curve oracle spent of the budget: a
	// fleet that sees every SPEND as it comes and allows it while the total
	// stays within the curve's target plus one bid, catching up at most 3x
	// the curve's pace (oracleSpend). Below 99.5%, this day's SPENDs did
	// not reach the curve, whatever its expectation (Reachable): a 62-bid
	// campaign a few SPENDs an hour drew too few in its afternoon.
	OracleUtilisation float64 `json:"oracle_utilisation"`
	// BehindMaxMicros is the furthest pacer fell behind the less of the
	// curve and the oracle's spend, sampled every 10 s (the "behind"
	// invariant's distance); BehindBoundMicros, that invariant's bound.
	BehindMaxMicros   int64 `json:"behind_max_micros"`
	BehindBoundMicros int64 `json:"behind_bound_micros"`
	// CatchUpMaxRatio is the most the campaign spent in a window the
	// "catch-up" invariant judges (10 s for one host, 5 minutes for a
	// fleet), over that window's bound: above 1, broken.
	CatchUpMaxRatio float64 `json:"catch_up_max_ratio"`
	// ColdStartRatio is what a fresh fleet spent over the window the
	// "cold start" invariant judges, over what it could have; 0 where
	// not judged.
	ColdStartRatio float64 `json:"cold_start_ratio,omitempty"`
	// Expect is the bounds the scenario declares for the campaign, which
	// the run was judged by too (Spec.Expect).
	Expect  *Expect             `json:"expect,omitempty"`
	Results map[string]*Quality `json:"results"`
	// Pacer's daemons' answers.
	Allowed, Paced, Exhausted, Errors int64
	// ExhaustionPropagationSeconds: from the first host answering
	// "exhausted" to the last live host doing so; -1 if the campaign never
	// exhausted or not every live host saw it.
	ExhaustionPropagationSeconds float64   `json:"exhaustion_propagation_seconds"`
	Ledger                       LedgerEnd `json:"ledger"`
	// LuaKeyMatches: the Lua baseline's allowed total, counted by the
	// generator, equals its budget minus its Redis key at the end. Judged
	// only if none of its calls failed: a failed one (a reply lost to a
	// timeout on a loaded machine) may have run, its spend uncounted.
	LuaKeyMatches *bool `json:"lua_key_matches,omitempty"`
	// BatchKeysMatch: the batching baseline's allowed total, counted by the
	// generator, equals its budget minus its Redis keys at the end: every
	// spend it allowed was flushed, once. Judged only if none of its flushes
	// failed: a failed one (a reply lost to a timeout on a loaded machine)
	// may have run, and is sent again.
	BatchKeysMatch *bool `json:"batch_keys_match,omitempty"`

	rt *campaignRT
}

// LedgerEnd is the campaign-day's ledger at the end of the run.
type LedgerEnd struct {
	LeasedAtDayEnd int64 `json:"leased_at_day_end"`
	Spent          int64 `json:"spent"`
	Lost           int64 `json:"lost"`
	Unreleased     int64 `json:"unreleased"` // locked + available
	Leased         int64 `json:"leased"`
	HeldByKilled   int64 `json:"held_by_killed_host"`
	// Rebalanced: micros the reconciler moved between the day's shards (half
	// the sum of each shard's budget's distance from its opening split).
	Rebalanced int64    `json:"rebalanced"`
	Problems   []string `json:"problems,omitempty"`
}

// Summary aggregates one strategy over the campaigns it ran on.
type Summary struct {
	Campaigns          int     `json:"campaigns"`
	OverspendCampaigns int     `json:"overspend_campaigns"`
	OverspendMaxShare  float64 `json:"overspend_max_share"` // of budget
	OverspendMicros    int64   `json:"overspend_micros"`    // summed over campaigns that overspent
	UtilisationMin     float64 `json:"utilisation_min"`
	UtilisationMean    float64 `json:"utilisation_mean"`
	TrackingMax        float64 `json:"tracking_error_max"`
	TrackingRMSMean    float64 `json:"tracking_error_rms_mean"`
	SmoothnessMean     float64 `json:"smoothness_cv_mean"`
	CmdsPer1000        float64 `json:"redis_cmds_per_1000_spends"`
	CmdsPer1000Hot     float64 `json:"redis_cmds_per_1000_spends_hot"` // campaigns at >= 1,000 SPENDs/s
	CmdsPer1000HotMax  float64 `json:"redis_cmds_per_1000_spends_hot_max"`
	Spends             int64   `json:"spends"`
	LatencyP50         float64 `json:"latency_p50_us"`
	LatencyP99         float64 `json:"latency_p99_us"`
	LatencyP999        float64 `json:"latency_p999_us"`
	LatencySamples     int     `json:"latency_samples"`
}

// hotRate is the fleet rate at which a campaign counts as hot.
const hotRate = 1000

// results gathers the run's figures: the run's settings and Redis counts,
// each host's, each campaign's per strategy and its ledger at the end, and
// a summary per strategy.
func (r *runner) results(ctx context.Context) (*Results, error) {
	res := r.resultsHeader()
	for i, s := range strategies {
		if r.enabled[i] {
			res.Strategies = append(res.Strategies, s)
		}
	}
	for _, h := range r.hosts {
		res.Hosts = append(res.Hosts, hostResult(h))
	}
	for _, c := range r.camps {
		cr, err := r.campaignResult(ctx, c, res)
		if err != nil {
			return nil, err
		}
		res.Campaigns = append(res.Campaigns, cr)
	}
	for si, name := range strategies {
		if r.enabled[si] {
			res.Summary[name] = r.summary(res, si, name)
		}
	}
	return res, nil
}

// resultsHeader is the run's settings and Redis command counts.
func (r *runner) resultsHeader() *Results {
	sc := r.sc
	return &Results{
		Scenario: sc.Name, Seed: sc.Seed, Date: sc.Date, Start: r.first, End: r.end,
		SimulatedHours: r.end.Sub(r.first).Hours(), WarmupHours: time.Duration(sc.Warmup).Hours(),
		BaselineThin: sc.Baselines.Thin,
		Daemon: DaemonSettings{
			LeaseWindow: r.daemonCfg.LeaseWindow.String(), SkewBound: r.daemonCfg.SkewBound.String(),
			Grace: r.daemonCfg.Grace.String(), CapWindow: r.daemonCfg.CapWindow.String(),
			BurstWindow: r.daemonCfg.BurstWindow.String(), Step: time.Duration(sc.Step).String(),
			ArrivalTick: time.Duration(sc.ArrivalTick).String(),
		},
		Summary: map[string]*Summary{},
		Redis: RedisCounts{Pacer: r.pacerCnt.total.Load(), Reconciler: r.reconCnt.total.Load(),
			Lua: r.luaCnt.total.Load(), Batch: r.batchCnt.total.Load(),
			FailedWhilePaused: r.pacerCnt.failed.Load() + r.reconCnt.failed.Load() + r.luaCnt.failed.Load() + r.batchCnt.failed.Load()},
		Faults: r.faults, Notes: r.notes, ConservationOK: true,
	}
}

// hostResult is one host's SPENDs, what it allowed and, if it is alive, its
// daemon's ledger, lease and sparse counters.
func hostResult(h *hostRT) HostResult {
	hr := HostResult{Name: h.name, Weight: h.weight, Killed: !h.alive}
	if h.alive {
		hr.Daemon = map[string]string{}
		for _, f := range h.d.Info() {
			if strings.HasPrefix(f.Key, "ledger_") || strings.HasPrefix(f.Key, "leases_") || strings.HasPrefix(f.Key, "sparse_") {
				hr.Daemon[f.Key] = f.Value
			}
		}
	}
	for ci := range h.c {
		hr.Spends += h.c[ci].requests
		hr.AllowedMicros += h.c[ci].allowedMicros
	}
	return hr
}

// campaignCounts is what the hosts' generators counted for one campaign.
type campaignCounts struct {
	requests, blRequests int64
	allowed              [nStrategies]int64 // micros, per strategy
	batchFailed          int64              // the batching baseline's failed key flushes
	luaFailed            int64              // the Lua baseline's failed calls
}

// campaignResult is one campaign's figures per strategy (its pacer
// invariant violations appended to res) and its ledger at the end.
func (r *runner) campaignResult(ctx context.Context, c *campaignRT, res *Results) (*CampaignResult, error) {
	cr := &CampaignResult{ID: c.spec.ID, Curve: c.spec.Curve, TZ: c.spec.TZ, Traffic: c.shape.name,
		Rate: c.spec.Rate, Demand: c.spec.Demand, Hot: c.spec.Rate >= hotRate, Baselines: c.inBL,
		Results: map[string]*Quality{}, ExhaustionPropagationSeconds: -1, rt: c,
		Bids: float64(c.budget) / float64(max(r.sc.Bids.MeanMicros, 1)), Reachable: reachable(c),
		OracleUtilisation: float64(c.oracleSpent) / float64(max(c.budget, 1)), Expect: c.spec.Expect}
	if c.curve != nil {
		cr.BehindMaxMicros, cr.BehindBoundMicros = int64(c.behindMax()), int64(c.aheadBound())
		cr.ColdStartRatio = c.coldStartRatio()
		cr.CatchUpMaxRatio = c.catchUpMax(len(r.hosts))
	}
	n := r.countCampaign(c, cr)
	for si, name := range strategies {
		if !r.enabled[si] || (si != sPacer && si != sNoPacing && !c.inBL) {
			continue
		}
		cr.Results[name] = r.strategyQuality(c, si, n)
		if si == sPacer {
			res.Violations = append(res.Violations, violations(c, len(r.hosts))...)
			res.Violations = append(res.Violations, expectViolations(c, cr.Results[name].SpentMicros)...)
		}
	}
	if err := r.ledgerResult(ctx, c, cr); err != nil {
		return nil, err
	}
	if len(cr.Ledger.Problems) > 0 {
		res.ConservationOK = false
	}
	if c.inBL && r.enabled[sLua] && n.luaFailed == 0 {
		v, err := r.obsRDB.Get(ctx, luaKey(c.spec.ID)).Int64()
		ok := err == nil && c.blBudget-v == n.allowed[sLua]
		cr.LuaKeyMatches = &ok
	}
	if c.inBL && r.enabled[sBatch] && n.batchFailed == 0 {
		ok := true
		left := int64(0)
		for s := range r.sc.Baselines.BatchShards {
			v, err := r.obsRDB.Get(ctx, batchKey(c.spec.ID, s)).Int64()
			ok = ok && err == nil
			left += v
		}
		ok = ok && c.blBudget-left == n.allowed[sBatch]
		cr.BatchKeysMatch = &ok
	}
	return cr, nil
}

// countCampaign sums the hosts' counts of c, puts pacer's answers and how
// fast exhaustion spread over the live hosts in cr, and returns the sums.
func (r *runner) countCampaign(c *campaignRT, cr *CampaignResult) campaignCounts {
	var n campaignCounts
	var first, last time.Time
	allSaw := true
	for _, h := range r.hosts {
		hc := &h.c[c.idx]
		n.requests += hc.requests
		n.blRequests += hc.blRequests
		n.allowed[sPacer] += hc.allowedMicros
		n.allowed[sLua] += hc.luaAllowed
		n.allowed[sBatch] += hc.batchAllowed
		n.batchFailed += hc.batchFailed
		n.luaFailed += hc.luaErrors
		n.allowed[sNoPacing] += hc.npAllowed
		cr.Allowed += hc.allowed
		cr.Paced += hc.paced
		cr.Exhausted += hc.exhausted
		cr.Errors += hc.errors
		if !h.alive {
			continue
		}
		if hc.firstExhausted.IsZero() {
			allSaw = false
			continue
		}
		if first.IsZero() || hc.firstExhausted.Before(first) {
			first = hc.firstExhausted
		}
		if hc.firstExhausted.After(last) {
			last = hc.firstExhausted
		}
	}
	if allSaw && !first.IsZero() {
		cr.ExhaustionPropagationSeconds = last.Sub(first).Seconds()
	}
	return n
}

// strategyQuality is strategy si's figures for c: quality, commands per
// SPEND and hour, and for pacer how the hosts shared the spend.
func (r *runner) strategyQuality(c *campaignRT, si int, n campaignCounts) *Quality {
	budget, spends := c.budget, n.requests
	if si == sLua || si == sBatch {
		budget, spends = c.blBudget, n.blRequests
	}
	q := quality(c, si, budget, n.allowed[si])
	q.Spends = spends
	if si != sNoPacing {
		q.RedisCommands = c.cmdsAtEnd[si] - c.cmdsAtStart[si]
	}
	if spends > 0 {
		q.CmdsPer1000 = 1000 * float64(q.RedisCommands) / float64(spends)
	}
	if h := c.day.End.Sub(c.day.Start).Hours(); h > 0 {
		q.CmdsPerHour = float64(q.RedisCommands) / h
	}
	if si == sPacer {
		r.hostSharing(c, budget, q)
	}
	return q
}

// hostSharing puts in q how pacer's spend of c was shared among the hosts,
// against their weights and against the SPENDs each was asked.
func (r *runner) hostSharing(c *campaignRT, budget int64, q *Quality) {
	q.HostShareMaxDev = r.hostShareDev(c)
	q.HostShares, q.HostRequestShares = r.hostShares(c)
	if len(q.HostShares) == len(q.HostRequestShares) {
		for i, sh := range q.HostShares {
			q.HostShareAskedDev = max(q.HostShareAskedDev, 100*math.Abs(sh-q.HostRequestShares[i]))
		}
	}
	if budget > 0 {
		q.DemandAsked = float64(c.overHosts(r, func(hc *hostCampaign) int64 { return hc.askedMicros })) / float64(budget)
	}
	if allowed := c.overHosts(r, func(hc *hostCampaign) int64 { return hc.allowed }); allowed > 0 {
		for _, p := range q.HostRequestShares {
			q.HostShareNoise = max(q.HostShareNoise, 100*math.Sqrt(p*(1-p)/float64(allowed)))
		}
	}
}

// ledgerResult reads c's day from the ledger at the end: conservation, where
// the money is, and how much budget the reconciler moved between shards.
func (r *runner) ledgerResult(ctx context.Context, c *campaignRT, cr *CampaignResult) error {
	tot, problems, err := r.obsLedger.CheckDay(ctx, c.spec.ID, c.day.Key)
	if err != nil {
		return err
	}
	for _, p := range problems {
		cr.Ledger.Problems = append(cr.Ledger.Problems, p.String())
	}
	cr.Ledger.LeasedAtDayEnd = c.leasedAtEnd
	cr.Ledger.Spent, cr.Ledger.Lost, cr.Ledger.Leased = tot.Spent, tot.Lost, tot.Leased
	cr.Ledger.Unreleased = tot.Locked + tot.Available
	cr.Ledger.HeldByKilled = c.heldByKilled
	if n, err := r.obsLedger.DayShards(ctx, c.spec.ID, c.day.Key); err == nil && n > 0 {
		if shards, err := r.obsLedger.ReadShards(ctx, c.spec.ID, c.day.Key, n); err == nil {
			var budget, moved int64
			for _, s := range shards {
				budget += s.Budget
			}
			for i, part := range lease.Split(budget, n) {
				moved += max(shards[i].Budget-part, part-shards[i].Budget)
			}
			cr.Ledger.Rebalanced = moved / 2
		}
	}
	return nil
}

// summary is strategy si's figures over every campaign it ran.
func (r *runner) summary(res *Results, si int, name string) *Summary {
	s := &Summary{}
	var util, rms, smooth float64
	var cmds, spends, hotCmds, hotSpends int64
	for _, cr := range res.Campaigns {
		q, ok := cr.Results[name]
		if !ok {
			continue
		}
		if s.Campaigns == 0 || q.Utilisation < s.UtilisationMin {
			s.UtilisationMin = q.Utilisation
		}
		s.Campaigns++
		if q.OverspendMicros > 0 {
			s.OverspendCampaigns++
			s.OverspendMicros += q.OverspendMicros
			s.OverspendMaxShare = max(s.OverspendMaxShare, float64(q.OverspendMicros)/float64(q.BudgetMicros))
		}
		util += q.Utilisation
		rms += q.TrackingRMS
		smooth += q.Smoothness
		s.TrackingMax = max(s.TrackingMax, q.TrackingMax)
		cmds += q.RedisCommands
		spends += q.Spends
		if cr.Hot {
			hotCmds += q.RedisCommands
			hotSpends += q.Spends
			if q.Spends > 0 {
				s.CmdsPer1000HotMax = max(s.CmdsPer1000HotMax, q.CmdsPer1000)
			}
		}
	}
	if s.Campaigns > 0 {
		n := float64(s.Campaigns)
		s.UtilisationMean, s.TrackingRMSMean, s.SmoothnessMean = util/n, rms/n, smooth/n
	}
	s.Spends = spends
	if spends > 0 {
		s.CmdsPer1000 = 1000 * float64(cmds) / float64(spends)
	}
	if hotSpends > 0 {
		s.CmdsPer1000Hot = 1000 * float64(hotCmds) / float64(hotSpends)
	}
	var lat []time.Duration
	for _, h := range r.hosts {
		lat = append(lat, h.lat[si]...)
	}
	s.LatencySamples = len(lat)
	p := Percentiles(lat, 0.5, 0.99, 0.999)
	s.LatencyP50, s.LatencyP99, s.LatencyP999 = us(p[0]), us(p[1]), us(p[2])
	return s
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// quality computes one strategy's figures for a campaign from the minute
// samples of its cumulative spend.
func quality(c *campaignRT, si int, budget, allowed int64) *Quality {
	q := &Quality{BudgetMicros: budget, SpentMicros: allowed}
	q.OverspendMicros = Overspend(allowed, 0, budget)
	q.Utilisation = Utilisation(allowed, budget)
	actual, target := shares(c, si, budget)
	q.TrackingMax, q.TrackingRMS = TrackingError(actual, target)
	edges := slotEdges(c, si)
	planned := make([]int64, c.curve.Slots())
	cum := c.curve.Cumulative()
	for i := range planned {
		planned[i] = int64(float64(budget) * float64(cum[i+1]-cum[i]) / float64(bucket.PPB))
	}
	q.Smoothness = Smoothness(SlotDeltas(edges), planned)
	if n := len(c.samples); n > 60 && budget > 0 {
		q.LastHourShare = float64(c.samples[n-1].cum[si]-c.samples[n-61].cum[si]) / float64(budget)
		if last := 1 - float64(c.curve.AtTime(c.day.End.Add(-time.Hour), c.day))/float64(bucket.PPB); last > 0 {
			q.LastHourRatio = q.LastHourShare / last
		}
	}
	q.MaxHourRatio, q.MaxHourRatioBid = hourRatios(c, si, budget, c.maxBid, q)
	return q
}

// hourRatios returns the largest ratio of an hour's share of the spend to the
// curve's share of that hour, over the local day's hours with a plan, plain
// and with one bid of bid micros taken off each hour's spend; it fills q's
// hour series.
func hourRatios(c *campaignRT, si int, budget, bid int64, q *Quality) (plain, lessABid float64) {
	if budget <= 0 || len(c.samples) == 0 {
		return 0, 0
	}
	cumAt := func(t time.Time) int64 { // cumulative spend at the last sample not after t
		v := int64(0)
		for _, s := range c.samples {
			if s.t.After(t) {
				break
			}
			v = s.cum[si]
		}
		return v
	}
	for h := c.day.Start; h.Before(c.day.End); h = h.Add(time.Hour) {
		end := h.Add(time.Hour)
		if end.After(c.day.End) {
			end = c.day.End
		}
		planShare := float64(c.curve.AtTime(end, c.day)-c.curve.AtTime(h, c.day)) / float64(bucket.PPB)
		spent := cumAt(end) - cumAt(h)
		q.HourShares = append(q.HourShares, float64(spent)/float64(budget))
		q.PlanHourShares = append(q.PlanHourShares, planShare)
		if planShare <= 0 {
			continue
		}
		plain = max(plain, float64(spent)/float64(budget)/planShare)
		lessABid = max(lessABid, float64(max(spent-bid, 0))/float64(budget)/planShare)
	}
	return plain, lessABid
}

// hostShareDev is the largest gap, in points, between a host's share of the
// campaign's pacer spend and its share of the demand (its weight among live
// hosts at the end).
func (r *runner) hostShareDev(c *campaignRT) float64 {
	if len(c.samples) == 0 {
		return 0
	}
	last := c.samples[len(c.samples)-1]
	var total int64
	var weights float64
	for hi, h := range r.hosts {
		total += last.hosts[hi]
		weights += h.weight
	}
	if total <= 0 || weights <= 0 {
		return 0
	}
	dev := 0.0
	for hi, h := range r.hosts {
		d := 100 * (float64(last.hosts[hi])/float64(total) - h.weight/weights)
		dev = max(dev, d, -d)
	}
	return dev
}

// overHosts sums one count of the campaign's over its hosts: what pacer
// allowed (allowed), or what its SPENDs asked for, allowed or not
// (askedMicros).
func (c *campaignRT) overHosts(r *runner, count func(*hostCampaign) int64) int64 {
	var n int64
	for _, h := range r.hosts {
		n += count(&h.c[c.idx])
	}
	return n
}

// hostShares returns each host's share of the campaign's pacer spend and of
// the SPENDs it was asked.
func (r *runner) hostShares(c *campaignRT) (spend, requests []float64) {
	if len(c.samples) == 0 {
		return nil, nil
	}
	last := c.samples[len(c.samples)-1]
	var total, asked int64
	for hi, h := range r.hosts {
		total += last.hosts[hi]
		asked += h.c[c.idx].requests
	}
	for hi, h := range r.hosts {
		if total > 0 {
			spend = append(spend, float64(last.hosts[hi])/float64(total))
		}
		if asked > 0 {
			requests = append(requests, float64(h.c[c.idx].requests)/float64(asked))
		}
	}
	return spend, requests
}

// shares returns, per minute sample, the cumulative spend and the curve's
// cumulative target, both as shares of the budget.
func shares(c *campaignRT, si int, budget int64) (actual, target []float64) {
	if budget <= 0 {
		return nil, nil
	}
	for _, s := range c.samples {
		actual = append(actual, float64(s.cum[si])/float64(budget))
		target = append(target, float64(c.curve.AtTime(s.t, c.day))/float64(bucket.PPB))
	}
	return actual, target
}

// slotEdges returns the cumulative spend at the curve's slot edges, from the
// last minute sample at or before each edge.
func slotEdges(c *campaignRT, si int) []int64 {
	n := c.curve.Slots()
	edges := make([]int64, n+1)
	if len(c.samples) == 0 {
		return edges
	}
	for i := range edges {
		at := c.day.Start.Add(time.Duration(int64(c.day.Length()) * int64(i) / int64(n)))
		k := min(int(at.Sub(c.day.Start)/time.Minute), len(c.samples)-1)
		edges[i] = c.samples[k].cum[si]
	}
	return edges
}

// reachable reports whether c's traffic can follow its curve: in every hour
// of the local day, demand x the hour's share of the traffic is at least the
// curve's share of the hour (1% slack for the sampling of the shape).
func reachable(c *campaignRT) bool {
	const perHour = 60
	var total float64
	share := make([]float64, 24)
	for h := range 24 {
		for m := range perHour {
			v := c.shape.at((float64(h) + (float64(m)+0.5)/perHour) / 24)
			share[h] += v
			total += v
		}
	}
	if total <= 0 {
		return false
	}
	for h := range 24 {
		from := c.day.Start.Add(time.Duration(h) * c.day.Length() / 24)
		to := c.day.Start.Add(time.Duration(h+1) * c.day.Length() / 24)
		plan := float64(c.curve.AtTime(to, c.day)-c.curve.AtTime(from, c.day)) / float64(bucket.PPB)
		if c.spec.Demand*share[h]/total < plan*0.99 {
			return false
		}
	}
	return true
}
