package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// Clock tells the time. Every component takes one, so tests and the simulator
// can run a whole day, a midnight in another zone or a DST change in
// milliseconds.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now implements Clock.
func (f ClockFunc) Now() time.Time { return f() }

// SystemClock is the wall clock.
var SystemClock Clock = ClockFunc(time.Now)

// WaitClock is a Clock that also measures the daemon's waits on the
// ledger within a SPEND (a sparse campaign's fetch, SparseWait) in its own
// time; on any other Clock they are measured on the wall clock. The
// simulator's clocks are WaitClocks: a host's clock stands still while its
// SPEND is decided, so a fetch there ends when the ledger answers, however
// loaded the machine running the simulation (its figures depend on
// simulated time only).
type WaitClock interface {
	Clock
	// NewTimer is time.NewTimer on the clock: the channel receives once d
	// has passed on it; stop releases the timer.
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

// newTimer is a timer of d on clock where it is a WaitClock, else on the
// wall clock.
func newTimer(clock Clock, d time.Duration) (<-chan time.Time, func() bool) {
	if w, ok := clock.(WaitClock); ok {
		return w.NewTimer(d)
	}
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// Config tunes a Daemon. It is pacerd's one daemon configuration: the
// config file (package config) decodes its keys straight into it, by the
// yaml tags below, and the file's own keys (socket, Redis and NATS
// addresses, secrets, logging) sit beside it there. Defaults and checks
// live here only: a zero field takes the default documented on it
// (DefaultConfig lists them), and Validate reports what does not make sense,
// naming each setting by its key in the config file.
type Config struct {
	// Holder names this daemon in lease records and the audit stream
	// (default: "pacerd"; pacerd uses the host name). At most 100 bytes, no
	// '|', spaces or control characters: lease records are
	// "amount|holder|expiry".
	Holder string `yaml:"holder"`
	// LeaseTiming is the file's lease section: the fencing numbers.
	LeaseTiming `yaml:"lease"`
	// TickInterval is how often the refill loop runs (default 100ms). It must
	// be shorter than LeaseWindow.
	TickInterval time.Duration `yaml:"tick_interval"`
	// CampaignRefresh is how often the daemon reads the ledger's stream of
	// campaign changes, one read for all its campaigns, and re-reads the
	// settings of those it names (default: LeaseWindow, so a daemon that
	// missed a broadcast learns of a pause within a lease window); how often
	// a campaign's shards found empty are tried again; and how often a campaign-day this
	// daemon found exhausted has its shards read again (budget released by
	// other daemons comes back to them).
	CampaignRefresh time.Duration `yaml:"campaign_refresh"`
	// CampaignReread is how often each campaign's settings are read in full
	// whether or not the change stream named it (default 30m): a safety net
	// for a change record lost with a Redis failover and a broadcast lost
	// with it.
	CampaignReread time.Duration `yaml:"campaign_reread"`
	// CampaignIdle: a campaign without SPEND, REFUND or BALANCE for this
	// long is dropped from memory once its leases are released, and loaded
	// again on its next use (default StandingIdle + 10m, so a sparse
	// campaign's standing lease has lapsed first; Never: never). It must
	// exceed DedupWindow, so no remembered auction outlives its campaign.
	CampaignIdle time.Duration `yaml:"campaign_idle"`
	// EventRecheck is the least time between two ledger reads a broadcast
	// triggers for one campaign (default LeaseWindow/8). The first event
	// after a quiet spell is acted on at the next tick; a flood of events
	// (forged, replayed by a key holder, or a loop) costs at most one
	// settings read per campaign per EventRecheck, and no lease call. An
	// operator's event naming a settings version newer than any seen is
	// not limited: Run reads it at once (see Run).
	EventRecheck time.Duration `yaml:"-"`
	// LedgerTimeout bounds one ledger call (default 2s).
	LedgerTimeout time.Duration `yaml:"ledger_timeout"`
	// DedupWindow is how long the auction id of an allowed SPEND is
	// remembered at most (default 10m), so that a retry is not charged twice
	// and a refund with the id is bound to the auction's charge and day.
	DedupWindow time.Duration `yaml:"-"`
	// DedupMemoryBytes bounds the memory of remembered auction ids, for the
	// whole daemon (default 64 MiB: about 1.25 million ids, 40 bytes and an
	// index slot each). When it is reached the oldest ids are forgotten
	// first, before DedupWindow; the window actually kept is exported as the
	// pacer_auction_ids_window_seconds gauge. MinDedupMemoryBytes to
	// MaxDedupMemoryBytes.
	DedupMemoryBytes int64 `yaml:"dedup_memory_bytes"`
	// UnknownCampaignTTL is how long an id the ledger does not know is
	// answered "unknown campaign" without another ledger read (default
	// 10s, at most 1h); a campaign created meanwhile is usable within it.
	UnknownCampaignTTL time.Duration `yaml:"unknown_campaign_ttl"`
	// MaxCampaignLoads bounds first-use campaign loads in flight (default
	// 64, at most 10,000); a first use beyond it is refused with a retry
	// error.
	MaxCampaignLoads int `yaml:"max_campaign_loads"`

	// Curves are the pacing curves by name; "flat" is built in.
	Curves map[string]*bucket.Curve `yaml:"-"`
	// Publisher, if set, broadcasts what this daemon learns first (a
	// campaign-day exhausted) to the fleet. Open sets it to its NATS
	// broadcaster when it has one.
	Publisher Publisher `yaml:"-"`
	// Journal, if set, records the leases held, so that a restart after a
	// crash gives back what was not spent (see Journal and Reclaim). Open
	// sets it from Links.StateDir.
	Journal *Journal    `yaml:"-"`
	Clock   Clock       `yaml:"-"`
	Logger  *zap.Logger `yaml:"-"`

	// LedgerGate, if set, is asked before every new lease (grant or renewal)
	// and refuses it with an error while the ledger is not durable or this
	// host's clock is off (see LedgerGate.Err). It must not block. Open
	// builds one from Links.Durability.
	LedgerGate func(context.Context) error `yaml:"-"`

	// Links are what Open connects the daemon to; New ignores them.
	Links Links `yaml:"-"`
}

// LeaseTiming is the lease section of Config. The fencing rule that keeps a
// cut-off daemon from overspending lives in these numbers: a daemon spends a
// lease only until expiry minus SkewBound, and the reconciler settles it only
// after expiry plus Grace, so Grace must exceed SkewBound.
type LeaseTiming struct {
	// LeaseWindow is how long a lease lasts (default 30s). A daemon holds two
	// staggered leases per busy campaign and makes about one ledger call per
	// half window. It must exceed 4 x SkewBound.
	LeaseWindow time.Duration `yaml:"window"`
	// SkewBound is the largest clock difference between hosts (default 1s). A
	// daemon spends a lease only until its expiry minus SkewBound.
	SkewBound time.Duration `yaml:"skew_bound"`
	// Grace is how long after expiry an unreleased lease may be settled
	// (default 2*SkewBound + 2s). It must exceed SkewBound.
	Grace time.Duration `yaml:"grace"`
	// CapWindow bounds each shard's available budget to what the curve
	// releases over this window (default 5m): catch-up without a burst.
	CapWindow time.Duration `yaml:"cap_window"`
	// BurstWindow sizes the bucket: its capacity is this many seconds of the
	// current drip rate, and never less than the largest recent SPEND
	// (default 2s).
	BurstWindow time.Duration `yaml:"burst_window"`
	// CatchUp is how fast a campaign behind its curve may recover, as a
	// multiple of the curve's pace (default 3, at most lease.MaxCatchUp; 1
	// spreads a deficit pro rata over the rest of the day). The ledger's
	// shards enforce it for the fleet; each daemon sizes its leases to it.
	CatchUp int64 `yaml:"max_catch_up"`
	// StandingWindow is how long a standing lease lasts (default 5m, at
	// least LeaseWindow): a campaign too sparse on this host to keep leases
	// dripping holds one bid's worth (up to four for a warm one with a large
	// budget, see standingBids), renewed each window, so that its next SPEND
	// finds it. A crash costs at most those bids.
	StandingWindow time.Duration `yaml:"standing_window"`
	// StandingIdle is how long after its last SPEND on this host a sparse
	// campaign keeps a standing lease (default 6h; Never: never hold one),
	// or three of the host's mean intervals between its last four SPENDs if
	// that is longer (at most 24h); CampaignIdle is extended as much.
	StandingIdle time.Duration `yaml:"standing_idle"`
	// SparseWait is how long a SPEND of a campaign sparse on this host
	// (fewer than two SPENDs per half LeaseWindow) that finds too little in
	// its bucket may wait for a lease of its amount from the ledger before
	// it is paced (default 5ms; Never: such SPENDs are paced at once, and
	// sparse campaigns hold standing leases instead). With it, a sparse
	// campaign holds no budget between its SPENDs: none strands on hosts
	// whose next SPEND does not come (docs/PACING.md). The ledger call is
	// not cut short at SparseWait: a lease that lands later serves the
	// campaign's next SPENDs.
	SparseWait time.Duration `yaml:"sparse_wait"`
}

// Never, as StandingIdle, SparseWait or CampaignIdle, turns the feature off (zero means
// the default). The config file writes it 0s.
const Never time.Duration = -1

// DefaultDedupMemoryBytes is Config.DedupMemoryBytes's default.
const DefaultDedupMemoryBytes = 64 << 20

// maxHolder bounds Config.Holder.
const maxHolder = 100

// DefaultConfig returns the defaults of the settings a config file holds
// (the fields with a yaml key), which is what an empty config file means.
// The others stay zero, for New to fill: Holder (pacerd names it after its
// host), EventRecheck (derived from the LeaseWindow in force), DedupWindow,
// the clock, logger and curves.
func DefaultConfig() Config {
	var c Config
	c.setFileDefaults()
	return c
}

// WithDefaults returns c with every zero field set to its default, or an
// error if the settings contradict each other (see Validate).
func (c Config) WithDefaults() (Config, error) {
	c.setDefaults()
	return c, c.Validate()
}

// setFileDefaults fills the zero fields that have a config-file key.
func (c *Config) setFileDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.LeaseWindow, 30*time.Second)
	def(&c.SkewBound, time.Second)
	def(&c.Grace, 2*c.SkewBound+2*time.Second)
	def(&c.CapWindow, 5*time.Minute)
	def(&c.BurstWindow, 2*time.Second)
	def(&c.StandingWindow, 5*time.Minute)
	if c.StandingIdle == 0 {
		c.StandingIdle = 6 * time.Hour
	}
	if c.SparseWait == 0 {
		c.SparseWait = 5 * time.Millisecond
	}
	if c.CatchUp == 0 {
		c.CatchUp = 3
	}
	def(&c.TickInterval, 100*time.Millisecond)
	def(&c.CampaignRefresh, c.LeaseWindow)
	def(&c.CampaignReread, 30*time.Minute)
	def(&c.LedgerTimeout, 2*time.Second)
	if c.CampaignIdle == 0 {
		c.CampaignIdle = max(c.StandingIdle, 0) + 10*time.Minute
	}
	def(&c.UnknownCampaignTTL, 10*time.Second)
	if c.MaxCampaignLoads <= 0 {
		c.MaxCampaignLoads = 64
	}
	if c.DedupMemoryBytes == 0 {
		c.DedupMemoryBytes = DefaultDedupMemoryBytes
	}
}

// setDefaults fills every zero field.
func (c *Config) setDefaults() {
	c.setFileDefaults()
	if c.Holder == "" {
		c.Holder = "pacerd"
	}
	if c.EventRecheck <= 0 {
		c.EventRecheck = c.LeaseWindow / 8
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = 10 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = SystemClock
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	curves := maps.Clone(c.Curves) // the caller's map is not ours to add to
	if curves == nil {
		curves = map[string]*bucket.Curve{}
	}
	if _, ok := curves["flat"]; !ok {
		curves["flat"] = bucket.Flat(24)
	}
	c.Curves = curves
}

// A ConfigError is one setting that does not make sense, named by its key in
// pacerd's config file (its yaml tag, dotted within the lease section).
type ConfigError struct {
	Key     string
	Problem string
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Problem }

// Validate reports every problem in c, joined, each a *ConfigError, or nil.
// It checks c as it is, defaults not applied: New validates after filling
// them, package config before (an explicit 0s in a config file is refused,
// where a zero field here means the default).
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Problem: fmt.Sprintf(format, args...)})
	}
	positive := func(key string, v time.Duration) bool {
		if v <= 0 {
			bad(key, "%v: must be positive", v)
			return false
		}
		return true
	}
	switch {
	case len(c.Holder) > maxHolder:
		bad("holder", "%d bytes; at most %d allowed", len(c.Holder), maxHolder)
	case strings.ContainsFunc(c.Holder, func(r rune) bool { return r == '|' || r <= ' ' || r == 0x7f }):
		bad("holder", "%q must not contain '|', spaces or control characters", c.Holder)
	}
	if c.UnknownCampaignTTL <= 0 || c.UnknownCampaignTTL > time.Hour {
		bad("unknown_campaign_ttl", "%v: want more than 0 and at most 1h", c.UnknownCampaignTTL)
	}
	if c.MaxCampaignLoads < 1 || c.MaxCampaignLoads > 10_000 {
		bad("max_campaign_loads", "%d: want 1 to 10000", c.MaxCampaignLoads)
	}
	if c.DedupMemoryBytes < MinDedupMemoryBytes || c.DedupMemoryBytes > MaxDedupMemoryBytes {
		bad("dedup_memory_bytes", "%d: want %d to %d", c.DedupMemoryBytes, MinDedupMemoryBytes, int64(MaxDedupMemoryBytes))
	}
	okWindow := positive("lease.window", c.LeaseWindow)
	okSkew := positive("lease.skew_bound", c.SkewBound)
	okGrace := positive("lease.grace", c.Grace)
	positive("lease.cap_window", c.CapWindow)
	positive("lease.burst_window", c.BurstWindow)
	if c.CatchUp < 1 || c.CatchUp > lease.MaxCatchUp {
		bad("lease.max_catch_up", "%d: want 1 to %d (a multiple of the curve's pace; 1 spreads a deficit over the rest of the day)", c.CatchUp, lease.MaxCatchUp)
	}
	if okWindow && c.StandingWindow < c.LeaseWindow {
		bad("lease.standing_window", "%v must be at least lease.window %v", c.StandingWindow, c.LeaseWindow)
	}
	if c.SparseWait > time.Second {
		bad("lease.sparse_wait", "%v: at most 1s (a SPEND waits this long for the ledger)", c.SparseWait)
	}
	okTick := positive("tick_interval", c.TickInterval)
	positive("campaign_refresh", c.CampaignRefresh)
	positive("campaign_reread", c.CampaignReread)
	if c.CampaignIdle > 0 && c.CampaignIdle <= c.DedupWindow {
		bad("campaign_idle", "%v must exceed the auction-id dedup window %v", c.CampaignIdle, c.DedupWindow)
	}
	positive("ledger_timeout", c.LedgerTimeout)
	if okSkew && okGrace && c.Grace <= c.SkewBound {
		bad("lease.grace", "%v must exceed lease.skew_bound %v, or the reconciler could settle a lease its holder may still spend", c.Grace, c.SkewBound)
	}
	if okSkew && okWindow && c.LeaseWindow <= 4*c.SkewBound {
		bad("lease.window", "%v must exceed 4 x lease.skew_bound (%v), or little of each lease is spendable", c.LeaseWindow, 4*c.SkewBound)
	}
	if okTick && okWindow && c.TickInterval >= c.LeaseWindow {
		bad("tick_interval", "%v must be shorter than lease.window %v", c.TickInterval, c.LeaseWindow)
	}
	return errors.Join(errs...)
}
