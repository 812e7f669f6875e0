package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// LedgerGate decides whether the daemon may take new leases. It runs its
// checks (the ledger's durability policy, this host's clock against Redis
// TIME) every Interval; while any fails, Err returns why, and the daemon asks
// the ledger for no new lease. It keeps spending what it holds: a closed
// gate stops new money, not the bidders.
//
// A new gate is closed until its first Check passes, and a failed check of
// any kind (Redis unreachable included) keeps it closed until one passes;
// while closed, it re-checks every ClosedInterval. A Redis that restarts
// between two checks is caught by Recheck, which pacerd calls on every new
// connection.
//
// It is safe for concurrent use.
type LedgerGate struct {
	cfg GateConfig

	mu      sync.Mutex // serialises Check and Add
	checks  []gateCheck
	state   atomic.Pointer[gateState]
	changed chan struct{} // wakes Run when a Check of another caller opened or closed the gate
	recheck chan struct{} // Recheck's requests for Run
}

// GateConfig tunes a LedgerGate. Zero fields take the defaults shown.
type GateConfig struct {
	// Interval between checks while the gate is open (default 10s).
	Interval time.Duration
	// ClosedInterval between checks while it is closed (default 1s).
	ClosedInterval time.Duration
	// Timeout bounds one round of checks (default 2s).
	Timeout time.Duration
	Logger  *zap.Logger
}

type gateCheck struct {
	name string
	fn   func(context.Context) error
}

type gateState struct{ err error }

// errGateUnchecked closes a gate until its first check.
var errGateUnchecked = errors.New("ledger checks (durability, clock) not run yet")

// NewLedgerGate returns a closed gate with no checks; Add them, then Check.
func NewLedgerGate(cfg GateConfig) *LedgerGate {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.ClosedInterval <= 0 {
		cfg.ClosedInterval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.Logger = cfg.Logger.Named("gate")
	g := &LedgerGate{cfg: cfg, changed: make(chan struct{}, 1), recheck: make(chan struct{}, 1)}
	g.state.Store(&gateState{err: errGateUnchecked})
	return g
}

// Add adds a named check ("durability", "clock"). It takes effect at the
// next Check.
func (g *LedgerGate) Add(name string, check func(context.Context) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checks = append(g.checks, gateCheck{name, check})
}

// Err returns why new leases are refused, or nil. It reads memory only: the
// grant path calls it (Config.LedgerGate).
func (g *LedgerGate) Err(context.Context) error { return g.state.Load().err }

// Recheck asks Run to check at once rather than at the next interval; it
// never blocks. pacerd calls it whenever its Redis client dials a new
// connection (lease.OnDial): a restarted or failed-over Redis is reached
// only through new connections, so it is checked before it has served more
// than the few calls in flight while the check runs.
func (g *LedgerGate) Recheck() {
	select {
	case g.recheck <- struct{}{}:
	default:
	}
}

// Check runs every check now, opens or closes the gate by the result, and
// returns it (the failures joined, each prefixed by its check's name).
func (g *LedgerGate) Check(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// A recheck asked for before now is answered by this check.
	select {
	case <-g.recheck:
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	var errs []error
	for _, c := range g.checks {
		if err := c.fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		err = &GateError{err: err}
	}
	prev := g.state.Swap(&gateState{err: err}).err
	if (err == nil) != (prev == nil) {
		select {
		case g.changed <- struct{}{}:
		default:
		}
	}
	switch {
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		g.cfg.Logger.Error("refusing new leases", zap.Error(err))
	case err == nil && prev != nil && prev != errGateUnchecked:
		g.cfg.Logger.Info("ledger checks pass again: taking new leases")
	}
	return err
}

// Run checks every Interval (ClosedInterval while closed), and at once when
// Recheck asks, until ctx is cancelled. It does not check at once: the
// caller has (before ready).
func (g *LedgerGate) Run(ctx context.Context) error {
	for {
		wait := g.cfg.Interval
		if g.state.Load().err != nil {
			wait = g.cfg.ClosedInterval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-g.changed:
			t.Stop() // the interval to wait changed
		case <-g.recheck:
			t.Stop()
			_ = g.Check(ctx)
		case <-t.C:
			_ = g.Check(ctx)
		}
	}
}

// GateError is why a LedgerGate refuses new leases; errors.Is sees through
// it to lease.ErrNotDurable, lease.ErrClockSkew or a Redis error.
type GateError struct{ err error }

func (e *GateError) Error() string { return "no new leases: " + e.err.Error() }

// Unwrap returns the failed checks' errors.
func (e *GateError) Unwrap() error { return e.err }

// ledgerRefusal returns why this daemon must not take a new lease now, or
// nil. The grant path calls it before asking the ledger for a lease (a grant
// or a renewal); without a Config.LedgerGate every grant may proceed.
func (d *Daemon) ledgerRefusal(ctx context.Context) error {
	if d.cfg.LedgerGate == nil {
		return nil
	}
	return d.cfg.LedgerGate(ctx)
}
