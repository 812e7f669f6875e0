package sim

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in YAML as "30s" or "100ms".
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: %q is not a duration such as 30s or 100ms (a unit is required)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Scenario is one simulated day, as a scenario file describes it. Parse it
// with ParseScenario; the zero value is not usable.
type Scenario struct {
	Name string `yaml:"name"`
	// Date is the local date every campaign is simulated on (YYYY-MM-DD). The
	// run covers the union of the campaigns' local days of that date.
	Date string `yaml:"date"`
	Seed uint64 `yaml:"seed"`
	// Warmup runs the fleet this long before the measured day (at most
	// 24h; default 0): the same traffic, pacer only, nothing counted. A
	// run without one measures every host's first day with each campaign,
	// whose first SPEND per host meets an empty bucket; one of 24h measures
	// the day after, as a fleet that has run for days sees it (standing
	// leases, bids and demand learnt, the day rolled at midnight).
	Warmup Duration `yaml:"warmup"`
	// Step is how often every live daemon's refill loop runs (default 1s).
	Step Duration `yaml:"step"`
	// ArrivalTick is the granularity of arrival instants within a step
	// (default 100ms); it must divide Step and 100ms (the batching baseline
	// flushes every 100ms).
	ArrivalTick Duration `yaml:"arrival_tick"`
	// CurvesDir is read with config.LoadCurves, relative to the scenario
	// file (default ../curves, i.e. configs/curves).
	CurvesDir string `yaml:"curves_dir"`
	// CurveFiles are extra curve files (config.ParseCurve), relative to the
	// scenario file.
	CurveFiles []string `yaml:"curve_files"`
	// ReconcileEvery is how often a modelled reconciler settles expired
	// leases on every shard (lease.Ledger.Settle, fence 0; default 1m).
	ReconcileEvery Duration     `yaml:"reconcile_every"`
	Daemon         DaemonTuning `yaml:"daemon"`
	Hosts          []Host       `yaml:"hosts"`
	// RedistributeKilled sends a killed host's traffic to the surviving hosts
	// (default true): the exchange stops sending to a dead bidder.
	RedistributeKilled *bool     `yaml:"redistribute_killed"`
	Bids               Bids      `yaml:"bids"`
	Defaults           Defaults  `yaml:"defaults"`
	Campaigns          []Spec    `yaml:"campaigns"`
	Faults             []Fault   `yaml:"faults"`
	Baselines          Baselines `yaml:"baselines"`

	// Resolved by ParseScenario.
	curves map[string]*bucket.Curve
	shapes []shape // per campaign
	budget []int64 // per campaign
	date   time.Time
}

// DaemonTuning overrides daemon.Config fields; zero means the daemon default.
type DaemonTuning struct {
	LeaseWindow Duration `yaml:"lease_window"`
	SkewBound   Duration `yaml:"skew_bound"`
	CapWindow   Duration `yaml:"cap_window"`
	BurstWindow Duration `yaml:"burst_window"`
	SparseWait  Duration `yaml:"sparse_wait"`
}

// Host is one bidder host running pacerd. Weight is its share of every
// campaign's traffic (normalised over the hosts; default 1).
type Host struct {
	Name   string  `yaml:"name"`
	Weight float64 `yaml:"weight"`
}

// Bids draws bid amounts. Dist is "lognormal" (default; Sigma default 0.5)
// or "uniform" (between MinMicros and MaxMicros); MeanMicros is the mean.
type Bids struct {
	Dist       string  `yaml:"dist"`
	MeanMicros int64   `yaml:"mean_micros"`
	Sigma      float64 `yaml:"sigma"`
	MinMicros  int64   `yaml:"min_micros"`
	MaxMicros  int64   `yaml:"max_micros"`
}

// Defaults apply to every campaign that does not say.
type Defaults struct {
	Traffic string  `yaml:"traffic"`
	Demand  float64 `yaml:"demand"`
	Curve   string  `yaml:"curve"`
	TZ      string  `yaml:"tz"`
	Shards  int     `yaml:"shards"`
}

// Spec is one campaign of a scenario.
type Spec struct {
	ID string `yaml:"id"`
	// Rate is the mean SPENDs per second over the campaign's local day,
	// summed over the fleet.
	Rate float64 `yaml:"rate"`
	// Demand is expected daily demand (rate x day x mean bid) over the
	// budget: 0.5 under-, 1 just-, 1.5 over-subscribed. The budget is derived
	// from it unless BudgetMicros is set, in which case Demand is derived.
	Demand       float64 `yaml:"demand"`
	BudgetMicros int64   `yaml:"budget_micros"`
	// Curve names a curve of CurvesDir or CurveFiles, or is "auto": each
	// day is paced by the curve the fleet fits to the demand it recorded the
	// days before (daemon.AutoCurve), flat without any; a warm-up records a
	// day of it.
	Curve  string `yaml:"curve"`
	TZ     string `yaml:"tz"`
	Shards int    `yaml:"shards"`
	// Traffic is the shape of arrivals over the local day: "flat",
	// "cosine" (peak 4x trough, peak at 20:00 local; "cosine@14" peaks at
	// 14:00), "curve" (follows the campaign's pacing curve) or
	// "csv:PATH" (hourly weights, one per line or "hour,weight").
	Traffic string `yaml:"traffic"`
	// Expect declares bounds the campaign's day must meet beyond the
	// pacing invariants every run is judged by: a scenario written for a
	// goal states it here, and every run of it is judged by it
	// (expectViolations).
	Expect *Expect `yaml:"expect"`
}

// Expect is a campaign's declared bounds, each a share of its budget (0
// to 1); a zero field declares nothing.
type Expect struct {
	// TrackingMax bounds the tracking error at every minute of the local
	// day: |spent / budget − C(t)|, C the curve's cumulative share.
	TrackingMax float64 `yaml:"tracking_max" json:"tracking_max,omitempty"`
	// Utilisation and BelowIdeal: the day spends at least the less of
	// Utilisation and the curve oracle's utilisation (what following the
	// curve could spend of this day's SPENDs) less BelowIdeal.
	Utilisation float64 `yaml:"utilisation" json:"utilisation,omitempty"`
	BelowIdeal  float64 `yaml:"below_ideal" json:"below_ideal,omitempty"`
}

// Fault is one event of the fault schedule. At is measured from the start
// of the run (the earliest campaign's local midnight). Exactly one of Kill,
// PauseRedis, StopNATS and RefuseLeases is set.
type Fault struct {
	At         Duration `yaml:"at"`
	Kill       string   `yaml:"kill"`
	PauseRedis Duration `yaml:"pause_redis"`
	StopNATS   bool     `yaml:"stop_nats"`
	// RefuseLeases names a host whose ledger gate refuses new leases for
	// For, as a host's does when its clock is off by more than the skew
	// bound: it keeps serving SPENDs from what it holds, and its clients
	// keep sending them.
	RefuseLeases string   `yaml:"refuse_leases"`
	For          Duration `yaml:"for"`
}

// Baselines selects the alternative strategies run on the same arrivals.
type Baselines struct {
	// Thin runs the Redis-backed baselines (lua, batch) on every Thin-th
	// arrival of each host and campaign, with the budget divided by Thin,
	// so a day of them fits the run's time budget (default 1: every
	// arrival). No pacing always sees every arrival.
	Thin int `yaml:"thin"`
	// Campaigns restricts the Redis-backed baselines to these ids (default
	// all).
	Campaigns []string `yaml:"campaigns"`
	// Disable lists strategies not to run: "lua", "batch", "nopacing".
	Disable []string `yaml:"disable"`
	// FlushEvery is the batching baseline's flush period (default 100ms).
	FlushEvery Duration `yaml:"flush_every"`
	// BatchShards is the batching baseline's key count (default 8).
	BatchShards int `yaml:"batch_shards"`
}

// LoadScenario reads and parses a scenario file; relative paths in it are
// resolved from the file's directory.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := ParseScenario(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s, nil
}

// ParseScenario parses a scenario, fills defaults, loads its curves and
// traffic shapes, and reports every problem it finds. baseDir resolves
// relative paths.
func ParseScenario(data []byte, baseDir string) (*Scenario, error) {
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if err := s.resolve(baseDir); err != nil {
		return nil, err
	}
	return &s, nil
}

// problems collects what is wrong with a scenario, so that one parse names
// every error.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// resolve fills the scenario's defaults, loads its curves and shapes, works
// out each campaign's budget and checks everything, in that order.
func (s *Scenario) resolve(baseDir string) error {
	var p problems
	if s.Name == "" {
		s.Name = "scenario"
	}
	s.resolveClock(&p)
	s.resolveBaselines(&p)
	hosts := s.resolveHosts(&p)
	s.resolveBids(&p)
	dir := s.resolveCurves(&p, baseDir)
	campaigns := s.resolveCampaigns(&p, baseDir, dir)
	for _, id := range s.Baselines.Campaigns {
		if !campaigns[id] {
			p.add("baselines.campaigns: %q is not a campaign of this scenario", id)
		}
	}
	s.resolveFaults(&p, hosts)
	return errors.Join(p...)
}

// resolveClock checks the date, the seed and the run's steps and ticks.
func (s *Scenario) resolveClock(p *problems) {
	if s.Date == "" {
		p.add("date: missing; give the local date to simulate, such as 2026-11-21")
	} else if d, err := time.Parse("2006-01-02", s.Date); err != nil {
		p.add("date: %q is not YYYY-MM-DD", s.Date)
	} else {
		s.date = d
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&s.Step, time.Second)
	def(&s.ArrivalTick, 100*time.Millisecond)
	def(&s.ReconcileEvery, time.Minute)
	def(&s.Baselines.FlushEvery, 100*time.Millisecond)
	step, tick := time.Duration(s.Step), time.Duration(s.ArrivalTick)
	switch {
	case step < 0 || tick < 0 || s.ReconcileEvery < 0 || s.Baselines.FlushEvery < 0:
		p.add("step, arrival_tick, reconcile_every and baselines.flush_every must be positive")
	case step%tick != 0:
		p.add("arrival_tick %v must divide step %v", tick, step)
	case time.Duration(s.Baselines.FlushEvery)%tick != 0:
		p.add("arrival_tick %v must divide baselines.flush_every %v", tick, time.Duration(s.Baselines.FlushEvery))
	case step > time.Minute:
		p.add("step %v: at most 1m (metrics are sampled every simulated minute)", step)
	case time.Minute%step != 0:
		p.add("step %v must divide a minute", step)
	}
	if s.Warmup < 0 || time.Duration(s.Warmup) > 24*time.Hour {
		p.add("warmup %v: want 0 to 24h", time.Duration(s.Warmup))
	}
	if s.RedistributeKilled == nil {
		t := true
		s.RedistributeKilled = &t
	}
}

// resolveBaselines checks the baselines' thinning, shards and disabled set.
func (s *Scenario) resolveBaselines(p *problems) {
	if s.Baselines.Thin == 0 {
		s.Baselines.Thin = 1
	}
	if s.Baselines.Thin < 0 {
		p.add("baselines.thin %d: want 1 or more", s.Baselines.Thin)
	}
	if s.Baselines.BatchShards == 0 {
		s.Baselines.BatchShards = 8
	}
	if s.Baselines.BatchShards < 1 || s.Baselines.BatchShards > 256 {
		p.add("baselines.batch_shards %d: want 1 to 256", s.Baselines.BatchShards)
	}
	for _, d := range s.Baselines.Disable {
		if d != StrategyLua && d != StrategyBatch && d != StrategyNoPacing {
			p.add("baselines.disable: %q: want lua, batch or nopacing", d)
		}
	}
}

// resolveHosts names and weighs the hosts; it returns the set of names.
func (s *Scenario) resolveHosts(p *problems) map[string]bool {
	if len(s.Hosts) == 0 {
		p.add("hosts: none; a scenario needs at least one host")
	}
	seen := map[string]bool{}
	for i := range s.Hosts {
		h := &s.Hosts[i]
		if h.Name == "" {
			h.Name = fmt.Sprintf("host%d", i+1)
		}
		if seen[h.Name] {
			p.add("hosts[%d]: name %q used twice", i, h.Name)
		}
		seen[h.Name] = true
		if h.Weight == 0 {
			h.Weight = 1
		}
		if h.Weight < 0 || math.IsNaN(h.Weight) || math.IsInf(h.Weight, 0) {
			p.add("hosts[%d] (%s): weight %v: want a positive number", i, h.Name, h.Weight)
		}
	}
	return seen
}

// resolveBids checks the bid distribution and settles its mean.
func (s *Scenario) resolveBids(p *problems) {
	b := &s.Bids
	if b.Dist == "" {
		b.Dist = "lognormal"
	}
	if b.MeanMicros == 0 {
		b.MeanMicros = 2000
	}
	switch b.Dist {
	case "lognormal":
		if b.Sigma == 0 {
			b.Sigma = 0.5
		}
		if b.Sigma < 0 || b.Sigma > 3 || b.MeanMicros < 1 {
			p.add("bids: lognormal needs mean_micros >= 1 and 0 < sigma <= 3")
		}
	case "uniform":
		if b.MinMicros == 0 && b.MaxMicros == 0 {
			b.MinMicros, b.MaxMicros = b.MeanMicros/2, b.MeanMicros*3/2
		}
		if b.MinMicros < 1 || b.MaxMicros < b.MinMicros {
			p.add("bids: uniform needs 1 <= min_micros <= max_micros")
		}
		b.MeanMicros = (b.MinMicros + b.MaxMicros) / 2
	default:
		p.add("bids.dist: %q: want lognormal or uniform", b.Dist)
	}
}

// resolveCurves loads curves_dir and curve_files into s.curves; it returns
// the directory the curves came from.
func (s *Scenario) resolveCurves(p *problems, baseDir string) string {
	if s.CurvesDir == "" {
		s.CurvesDir = "../curves"
	}
	dir := s.CurvesDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(baseDir, dir)
	}
	curves, err := config.LoadCurves(os.DirFS(dir))
	if err != nil {
		p.add("curves_dir %s: %v", dir, err)
		curves = map[string]*bucket.Curve{config.FlatCurve: bucket.Flat(24)}
	}
	for _, f := range s.CurveFiles {
		path := f
		if !filepath.IsAbs(path) {
			path = filepath.Join(baseDir, path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			p.add("curve_files: %v", err)
			continue
		}
		c, err := config.ParseCurve(data)
		if err != nil {
			p.add("curve_files: %s: %v", f, err)
			continue
		}
		if _, dup := curves[c.Name()]; dup {
			p.add("curve_files: %s: curve %q is already defined", f, c.Name())
			continue
		}
		curves[c.Name()] = c
	}
	s.curves = curves
	return dir
}

// resolveCampaigns fills each campaign from the defaults and resolves it;
// it returns the set of campaign ids.
func (s *Scenario) resolveCampaigns(p *problems, baseDir, curvesDir string) map[string]bool {
	d := &s.Defaults
	if d.Traffic == "" {
		d.Traffic = "flat"
	}
	if d.Demand == 0 {
		d.Demand = 1.5
	}
	if d.Curve == "" {
		d.Curve = config.FlatCurve
	}
	if d.TZ == "" {
		d.TZ = "UTC"
	}
	if d.Shards == 0 {
		d.Shards = lease.DefaultShards
	}
	if len(s.Campaigns) == 0 {
		p.add("campaigns: none; a scenario needs at least one campaign")
	}
	seen := map[string]bool{}
	s.shapes = make([]shape, len(s.Campaigns))
	s.budget = make([]int64, len(s.Campaigns))
	for i := range s.Campaigns {
		c := &s.Campaigns[i]
		where := fmt.Sprintf("campaigns[%d]", i)
		if c.ID != "" {
			where += " (" + c.ID + ")"
		}
		if !lease.ValidCampaignID(c.ID) {
			p.add("%s: id %q: want 1 to 128 characters from [A-Za-z0-9_.-]", where, c.ID)
		}
		if seen[c.ID] {
			p.add("%s: id used twice", where)
		}
		seen[c.ID] = true
		s.resolveCampaign(p, i, where, baseDir, curvesDir)
	}
	return seen
}

// resolveCampaign resolves campaign i (where names it in errors): the
// defaults it takes, its curve, zone, shards, traffic shape and budget.
func (s *Scenario) resolveCampaign(p *problems, i int, where, baseDir, curvesDir string) {
	c, d := &s.Campaigns[i], &s.Defaults
	if c.Traffic == "" {
		c.Traffic = d.Traffic
	}
	if c.Curve == "" {
		c.Curve = d.Curve
	}
	if c.TZ == "" {
		c.TZ = d.TZ
	}
	if c.Shards == 0 {
		c.Shards = d.Shards
	}
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		p.add("%s: rate %v: want SPENDs per second > 0", where, c.Rate)
	}
	curve, ok := s.curves[c.Curve]
	if !ok && c.Curve != daemon.AutoCurve {
		p.add("%s: curve %q: not in %s nor curve_files (have %s), nor %s", where, c.Curve, curvesDir, strings.Join(sortedKeys(s.curves), ", "), daemon.AutoCurve)
	}
	if c.Curve == daemon.AutoCurve {
		ok = c.Traffic != "curve"
		if !ok {
			p.add("%s: traffic curve follows the campaign's curve, and an %s curve is known only once the fleet fits it: name a shape", where, daemon.AutoCurve)
		}
	}
	if _, err := time.LoadLocation(c.TZ); err != nil {
		p.add("%s: tz %q is not an IANA zone such as America/New_York", where, c.TZ)
	}
	if c.Shards < 1 || c.Shards > lease.MaxShards {
		p.add("%s: shards %d: want 1 to %d", where, c.Shards, lease.MaxShards)
	}
	if ok {
		sh, err := parseShape(c.Traffic, curve, baseDir)
		if err != nil {
			p.add("%s: traffic: %v", where, err)
		}
		s.shapes[i] = sh
	}
	s.resolveBudget(p, i, where)
	if e := c.Expect; e != nil {
		for _, f := range []struct {
			key string
			v   float64
		}{{"tracking_max", e.TrackingMax}, {"utilisation", e.Utilisation}, {"below_ideal", e.BelowIdeal}} {
			if !(f.v >= 0 && f.v <= 1) {
				p.add("%s: expect.%s %v: want a share of the budget, 0 to 1", where, f.key, f.v)
			}
		}
		if e.BelowIdeal > 0 && e.Utilisation == 0 {
			p.add("%s: expect.below_ideal bounds the utilisation: give expect.utilisation too", where)
		}
	}
}

// resolveBudget sets campaign i's budget from its demand, or its demand
// from its budget: expected demand over a 24-hour day (shapes have mean 1)
// at its rate and the bids' mean.
func (s *Scenario) resolveBudget(p *problems, i int, where string) {
	c := &s.Campaigns[i]
	demand := c.Rate * 86400 * float64(s.Bids.MeanMicros)
	switch {
	case c.BudgetMicros < 0:
		p.add("%s: budget_micros %d is negative", where, c.BudgetMicros)
	case c.BudgetMicros > 0:
		c.Demand = demand / float64(c.BudgetMicros)
	default:
		if c.Demand == 0 {
			c.Demand = s.Defaults.Demand
		}
		if !(c.Demand > 0) {
			p.add("%s: demand %v: want > 0", where, c.Demand)
			return
		}
		c.BudgetMicros = int64(demand / c.Demand)
	}
	if c.BudgetMicros > lease.MaxBudgetMicros {
		p.add("%s: budget %d micros exceeds the ledger's maximum", where, c.BudgetMicros)
	}
	s.budget[i] = c.BudgetMicros
}

// resolveFaults checks that each fault does exactly one thing, at a time
// not before the run, to a host the scenario has.
func (s *Scenario) resolveFaults(p *problems, hosts map[string]bool) {
	for i, f := range s.Faults {
		n := 0
		if f.Kill != "" {
			n++
			if !hosts[f.Kill] {
				p.add("faults[%d]: kill: no host named %q", i, f.Kill)
			}
		}
		if f.PauseRedis != 0 {
			n++
			if f.PauseRedis < 0 {
				p.add("faults[%d]: pause_redis must be positive", i)
			}
		}
		if f.StopNATS {
			n++
		}
		if f.RefuseLeases != "" {
			n++
			if !hosts[f.RefuseLeases] {
				p.add("faults[%d]: refuse_leases: no host named %q", i, f.RefuseLeases)
			}
			if f.For <= 0 {
				p.add("faults[%d]: refuse_leases needs a positive for", i)
			}
		} else if f.For != 0 {
			p.add("faults[%d]: for is refuse_leases's duration", i)
		}
		if n != 1 {
			p.add("faults[%d]: give exactly one of kill, pause_redis, stop_nats, refuse_leases", i)
		}
		if f.At < 0 {
			p.add("faults[%d]: at %v is negative", i, time.Duration(f.At))
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}

// shape is a traffic shape over a campaign's local day: the arrival rate's
// multiplier at a fraction of the day, with mean 1 over the day.
type shape struct {
	name   string
	hourly []float64 // piecewise constant over equal slots, mean 1; nil for cosine
	peak   float64   // cosine: hour of the peak
}

// at returns the multiplier at frac (0 <= frac < 1) of the local day.
func (s shape) at(frac float64) float64 {
	if s.hourly == nil {
		// 1 + 0.6 cos: peak 1.6, trough 0.4, mean 1.
		return 1 + 0.6*math.Cos(2*math.Pi*(frac*24-s.peak)/24)
	}
	i := int(frac * float64(len(s.hourly)))
	return s.hourly[min(max(i, 0), len(s.hourly)-1)]
}

func parseShape(spec string, curve *bucket.Curve, baseDir string) (shape, error) {
	switch {
	case spec == "flat":
		return shape{name: spec, hourly: []float64{1}}, nil
	case spec == "cosine" || strings.HasPrefix(spec, "cosine@"):
		peak := 20.0
		if h, ok := strings.CutPrefix(spec, "cosine@"); ok {
			v, err := strconv.ParseFloat(h, 64)
			if err != nil || v < 0 || v >= 24 {
				return shape{}, fmt.Errorf("%q: the peak hour after @ must be 0 to 24", spec)
			}
			peak = v
		}
		return shape{name: spec, peak: peak}, nil
	case spec == "curve":
		w := curve.Weights()
		for i := range w {
			w[i] *= float64(len(w))
		}
		return shape{name: "curve:" + curve.Name(), hourly: w}, nil
	case strings.HasPrefix(spec, "csv:"):
		p := strings.TrimPrefix(spec, "csv:")
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		w, err := readHourlyCSV(p)
		if err != nil {
			return shape{}, err
		}
		return shape{name: spec, hourly: w}, nil
	case strings.HasPrefix(spec, "hours:"):
		w, err := parseHourly(strings.TrimPrefix(spec, "hours:"))
		if err != nil {
			return shape{}, fmt.Errorf("%q: %w", spec, err)
		}
		lo, hi := slices.Min(w), slices.Max(w)
		name := fmt.Sprintf("hours (peak %.1fx mean)", hi)
		if lo > 0 {
			name = fmt.Sprintf("hours (peak/trough %.0fx)", hi/lo)
		}
		return shape{name: name, hourly: w}, nil
	}
	return shape{}, fmt.Errorf("%q: want flat, cosine, cosine@HOUR, curve, hours:W0,...,W23 or csv:PATH", spec)
}

// parseHourly reads 24 comma-separated non-negative weights, normalised to
// mean 1.
func parseHourly(list string) ([]float64, error) {
	fields := strings.Split(list, ",")
	if len(fields) != 24 {
		return nil, fmt.Errorf("%d weights; want 24 (one per hour)", len(fields))
	}
	w := make([]float64, 24)
	var sum float64
	for i, f := range fields {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("weight %d: %q is not a finite number >= 0", i, f)
		}
		w[i], sum = v, sum+v
	}
	if sum == 0 {
		return nil, errors.New("weights sum to 0")
	}
	for i := range w {
		w[i] *= 24 / sum
	}
	return w, nil
}

// readHourlyCSV reads 24 non-negative weights, one per line ("w" or
// "hour,w"; a header line and # comments are skipped), normalised to mean 1.
func readHourlyCSV(path string) ([]float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var w []float64
	for i, rec := range recs {
		field := strings.TrimSpace(rec[len(rec)-1])
		v, err := strconv.ParseFloat(field, 64)
		if err != nil {
			if i == 0 {
				continue // header
			}
			return nil, fmt.Errorf("%s: line %d: %q is not a number", path, i+1, field)
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s: line %d: weight %v must be finite and >= 0", path, i+1, v)
		}
		w = append(w, v)
	}
	if len(w) != 24 {
		return nil, fmt.Errorf("%s: %d weights; want 24 (one per hour)", path, len(w))
	}
	var sum float64
	for _, v := range w {
		sum += v
	}
	if sum == 0 {
		return nil, fmt.Errorf("%s: weights sum to 0", path)
	}
	for i := range w {
		w[i] *= 24 / sum
	}
	return w, nil
}
