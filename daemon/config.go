package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// Config tunes a Daemon. Zero fields take the defaults documented on each.
type Config struct {
	// Holder names this daemon in lease records and the audit stream
	// (default: "pacerd").
	Holder string
	// LeaseWindow is how long a lease lasts (default 30s). A daemon holds two
	// staggered leases per busy campaign and makes about one ledger call per
	// half window.
	LeaseWindow time.Duration
	// SkewBound is the largest clock difference between hosts (default 1s). A
	// daemon spends a lease only until its expiry minus SkewBound.
	SkewBound time.Duration
	// Grace is how long after expiry an unreleased lease may be settled
	// (default 2*SkewBound + 2s). It must exceed SkewBound.
	Grace time.Duration
	// CapWindow bounds each shard's available budget to what the curve
	// releases over this window (default 5m): catch-up without a burst.
	CapWindow time.Duration
	// CatchUp is how fast a campaign behind its curve may recover, as a
	// multiple of the curve's pace (default 3, at most lease.MaxCatchUp; 1
	// spreads a deficit pro rata over the rest of the day). The ledger's
	// shards enforce it for the fleet; each daemon sizes its leases to it.
	CatchUp int64
	// StandingWindow is how long a standing lease lasts (default 5m): a
	// campaign too sparse on this host to keep leases dripping holds one bid's
	// worth, renewed each window, so that its next SPEND finds it. A crash
	// costs at most that bid.
	StandingWindow time.Duration
	// StandingIdle is how long after its last SPEND on this host a sparse
	// campaign keeps a standing lease (default 6h; negative: never hold one).
	StandingIdle time.Duration
	// BurstWindow sizes the bucket: its capacity is this many seconds of the
	// current drip rate, and never less than the largest recent SPEND
	// (default 2s).
	BurstWindow time.Duration
	// TickInterval is how often the refill loop runs (default 100ms).
	TickInterval time.Duration
	// CampaignRefresh is how often the daemon reads the ledger's stream of
	// campaign changes, one read for all its campaigns, and re-reads the
	// settings of those it names (default: LeaseWindow, so a daemon that
	// missed a broadcast learns of a pause within a lease window); how often
	// a campaign's shards found empty are tried again; and how often a campaign-day this
	// daemon found exhausted has its shards read again (budget released by
	// other daemons comes back to them).
	CampaignRefresh time.Duration
	// CampaignReread is how often each campaign's settings are read in full
	// whether or not the change stream named it (default 30m): a safety net
	// for a change record lost with a Redis failover and a broadcast lost
	// with it.
	CampaignReread time.Duration
	// CampaignIdle: a campaign without SPEND, REFUND or BALANCE for this
	// long is dropped from memory once its leases are released, and loaded
	// again on its next use (default StandingIdle + 10m, so a sparse
	// campaign's standing lease has lapsed first; negative: never). It must
	// exceed DedupWindow, so no remembered auction outlives its campaign.
	CampaignIdle time.Duration
	// EventRecheck is the least time between two ledger reads a broadcast
	// triggers for one campaign (default LeaseWindow/8). The first event
	// after a quiet spell is acted on at the next tick; a flood of events
	// (forged, replayed by a key holder, or a loop) costs at most one
	// settings read per campaign per EventRecheck, and no lease call.
	EventRecheck time.Duration
	// LedgerTimeout bounds one ledger call (default 2s).
	LedgerTimeout time.Duration
	// DedupWindow is how long the auction id of an allowed SPEND is
	// remembered at most (default 10m), so that a retry is not charged twice
	// and a refund with the id is bound to the auction's charge and day.
	DedupWindow time.Duration
	// DedupMemoryBytes bounds the memory of remembered auction ids, for the
	// whole daemon (default 64 MiB: about 1.25 million ids, 40 bytes and an
	// index slot each). When it is reached the oldest ids are forgotten
	// first, before DedupWindow; the window actually kept is exported as the
	// pacer_auction_ids_window_seconds gauge. MinDedupMemoryBytes to
	// MaxDedupMemoryBytes.
	DedupMemoryBytes int64
	// UnknownCampaignTTL is how long an id the ledger does not know is
	// answered "unknown campaign" without another ledger read (default
	// 10s); a campaign created meanwhile is usable within it.
	UnknownCampaignTTL time.Duration
	// MaxCampaignLoads bounds first-use campaign loads in flight (default
	// 64); a first use beyond it is refused with a retry error.
	MaxCampaignLoads int
	// Curves are the pacing curves by name; "flat" is built in.
	Curves map[string]*bucket.Curve
	// Publisher, if set, broadcasts what this daemon learns first (a
	// campaign-day exhausted) to the fleet.
	Publisher Publisher
	// Journal, if set, records the leases held, so that a restart after a
	// crash gives back what was not spent (see Journal and Reclaim).
	Journal *Journal
	Clock   Clock
	Logger  *zap.Logger

	// LedgerGate, if set, is asked before every new lease (grant or renewal)
	// and refuses it with an error while the ledger is not durable or this
	// host's clock is off (see LedgerGate.Err). It must not block.
	LedgerGate func(context.Context) error
}

// DefaultDedupMemoryBytes is Config.DedupMemoryBytes's default.
const DefaultDedupMemoryBytes = 64 << 20

// WithDefaults returns c with every zero field set to its default, or an
// error if the settings contradict each other.
func (c Config) WithDefaults() (Config, error) {
	err := c.setDefaults()
	return c, err
}

func (c *Config) setDefaults() error {
	if c.Holder == "" {
		c.Holder = "pacerd"
	}
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
	if c.CatchUp == 0 {
		c.CatchUp = 3
	}
	def(&c.TickInterval, 100*time.Millisecond)
	def(&c.CampaignRefresh, c.LeaseWindow)
	def(&c.EventRecheck, c.LeaseWindow/8)
	def(&c.CampaignReread, 30*time.Minute)
	def(&c.LedgerTimeout, 2*time.Second)
	def(&c.DedupWindow, 10*time.Minute)
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
	switch {
	case c.Grace <= c.SkewBound:
		return fmt.Errorf("grace %v must exceed the clock-skew bound %v", c.Grace, c.SkewBound)
	case c.LeaseWindow <= 4*c.SkewBound:
		return fmt.Errorf("lease window %v must exceed 4x the clock-skew bound %v", c.LeaseWindow, c.SkewBound)
	case c.CatchUp < 1 || c.CatchUp > lease.MaxCatchUp:
		return fmt.Errorf("catch-up %d: want 1 to %d (a multiple of the curve's pace)", c.CatchUp, lease.MaxCatchUp)
	case c.StandingWindow < c.LeaseWindow:
		return fmt.Errorf("standing lease window %v must be at least the lease window %v", c.StandingWindow, c.LeaseWindow)
	case c.CampaignIdle > 0 && c.CampaignIdle <= c.DedupWindow:
		return fmt.Errorf("campaign idle time %v must exceed the dedup window %v (or be negative: never drop)", c.CampaignIdle, c.DedupWindow)
	case len(c.Holder) > 100:
		return errors.New("holder name longer than 100 bytes")
	case c.DedupMemoryBytes < MinDedupMemoryBytes || c.DedupMemoryBytes > MaxDedupMemoryBytes:
		return fmt.Errorf("dedup memory %d bytes: want %d to %d", c.DedupMemoryBytes, MinDedupMemoryBytes, int64(MaxDedupMemoryBytes))
	}
	return nil
}
