package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// durabilityPolicy returns the ledger's durability policy from the config,
// with the WAIT timeout of replicas:N well inside one ledger call's timeout.
func durabilityPolicy(cfg config.Daemon) (want lease.Durability, assume *lease.Durability, err error) {
	want, assume, err = cfg.Ledger.Policy()
	if err != nil {
		return want, nil, err
	}
	want.WaitTimeout = min(time.Second, cfg.LedgerTimeout/2)
	return want, assume, nil
}

// newLedgerGate returns the gate pacerd consults before every new lease, with
// the durability check in it (the caller adds the daemon's clock check).
func newLedgerGate(cfg config.Daemon, rdb redis.UniversalClient, want lease.Durability, assume *lease.Durability, log *zap.Logger) *daemon.LedgerGate {
	gate := daemon.NewLedgerGate(daemon.GateConfig{Interval: cfg.Ledger.CheckInterval, Timeout: cfg.LedgerTimeout, Logger: log})
	lease.OnDial(rdb, gate.Recheck) // a restarted or failed-over Redis is re-checked at once
	gate.Add("durability", func(ctx context.Context) error {
		_, err := lease.CheckDurability(ctx, rdb, want, assume)
		return err
	})
	return gate
}

// firstLedgerCheck runs the gate's checks once before pacerd serves. A Redis
// that does not meet the policy, or a clock beyond the skew bound, refuses
// the start with the check's error (it names the fix). A Redis that cannot be
// reached yet does not: pacerd starts with the gate closed (degraded mode:
// no leases) and opens it once a check passes.
func firstLedgerCheck(ctx context.Context, gate *daemon.LedgerGate, rdb redis.UniversalClient, want lease.Durability, assume *lease.Durability, timeout time.Duration, log *zap.Logger) error {
	err := gate.Check(ctx)
	if errors.Is(err, lease.ErrNotDurable) || errors.Is(err, lease.ErrClockSkew) {
		return fmt.Errorf("refusing to start: %w", err)
	}
	// Credentials Redis refuses, or a certificate that does not verify, are
	// a configuration error no wait fixes: without this, pacerd would
	// report ready and deny every SPEND.
	if lease.IsAuthError(err) {
		return fmt.Errorf("refusing to start: %w (check redis_auth, redis_tls and PACER_REDIS_PASSWORD)", lease.CheckAuth(err))
	}
	if err != nil {
		log.Warn("cannot check the ledger yet; taking no leases until it can be checked", zap.Error(err))
		return nil
	}
	// Passed: say what was verified, and what was only assumed.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err := lease.CheckDurability(cctx, rdb, want, assume)
	if err != nil {
		return nil // the gate's own checks decide; this is only the log
	}
	for _, w := range rep.Warnings {
		log.Warn("ledger durability: "+w, zap.String("policy", rep.Policy))
	}
	for _, n := range rep.Nodes {
		log.Info("ledger durability verified", zap.String("policy", rep.Policy), zap.Stringer("redis", n))
	}
	return nil
}
