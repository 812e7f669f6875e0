package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis TIME is the fleet's one clock for money. The ledger scripts do not
// read it: every call passes the caller's clock (milliseconds since the
// epoch), so each daemon measures how far its clock is from Redis's and takes
// no new lease while that offset, widened by the measurement's uncertainty,
// is beyond the clock-skew bound; the reconciler runs no pass while its own
// host's is. A host whose clock runs ahead could otherwise settle other
// daemons' live leases early, and one whose clock runs behind would spend a
// lease after the ledger considers it expired. Within the bound, a daemon
// stops spending a lease at its expiry minus the bound, and the reconciler
// settles it only after its expiry plus a grace larger than the bound.

// ErrClockSkew is wrapped by *ClockSkewError.
var ErrClockSkew = errors.New("lease: clock differs from Redis TIME beyond the skew bound")

// ClockOffset is one measurement of a host's clock against Redis TIME.
type ClockOffset struct {
	// Addr is the Redis server measured.
	Addr string
	// Offset is the host's clock minus Redis's: positive when the host runs
	// ahead. It is measured at the midpoint of the round trip, so it is
	// exact to within RTT/2.
	Offset time.Duration
	// RTT is the round trip of the TIME call.
	RTT time.Duration
}

// Uncertainty is how far the true offset may be from Offset: half the round
// trip.
func (o ClockOffset) Uncertainty() time.Duration { return o.RTT / 2 }

// Check returns a *ClockSkewError when the offset, widened by its
// uncertainty, may exceed bound.
func (o ClockOffset) Check(bound time.Duration) error {
	if abs(o.Offset)+o.Uncertainty() > bound {
		return &ClockSkewError{ClockOffset: o, Bound: bound}
	}
	return nil
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// ClockSkewError: a host's clock is too far from Redis TIME to take leases.
type ClockSkewError struct {
	ClockOffset
	Bound time.Duration
}

func (e *ClockSkewError) Error() string {
	dir := "ahead of"
	if e.Offset < 0 {
		dir = "behind"
	}
	return fmt.Sprintf("this host's clock is %v %s redis at %s (TIME, ±%v), beyond lease.skew_bound %v: no new leases until the clock is fixed (check NTP: `chronyc tracking` or `timedatectl`)",
		abs(e.Offset).Round(time.Millisecond), dir, e.Addr, e.Uncertainty().Round(time.Microsecond), e.Bound)
}

// Unwrap lets errors.Is(err, ErrClockSkew) match.
func (e *ClockSkewError) Unwrap() error { return ErrClockSkew }

// clockSamples is how many TIME calls one measurement makes; the one with the
// shortest round trip wins, as in NTP, so one slow reply does not skew it.
const clockSamples = 3

// MeasureClockOffset measures now's offset to Redis TIME. For a Cluster it
// measures every master and returns the largest offset (the scripts of each
// shard run on its master's clock).
func MeasureClockOffset(ctx context.Context, rdb redis.UniversalClient, now func() time.Time) (ClockOffset, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return measure(ctx, rdb, addrOf(ctx, rdb), now)
	}
	var (
		mu    sync.Mutex
		worst ClockOffset
		found bool
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		o, err := measure(ctx, c, c.Options().Addr, now)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !found || abs(o.Offset)+o.Uncertainty() > abs(worst.Offset)+worst.Uncertainty() {
			worst, found = o, true
		}
		return nil
	})
	return worst, err
}

func addrOf(ctx context.Context, rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok {
		return nodeAddr(ctx, c)
	}
	return fmt.Sprintf("%T", rdb)
}

func measure(ctx context.Context, c redis.Cmdable, addr string, now func() time.Time) (ClockOffset, error) {
	best := ClockOffset{Addr: addr, RTT: -1}
	for range clockSamples {
		// The round trip is timed on the monotonic clock; the offset is
		// against the injected clock, which is what the daemon stamps.
		start := time.Now()
		before := now()
		redisNow, err := c.Time(ctx).Result()
		rtt := time.Since(start)
		if err != nil {
			return ClockOffset{}, fmt.Errorf("redis at %s: TIME: %w", addr, err)
		}
		if best.RTT >= 0 && rtt >= best.RTT {
			continue
		}
		mid := before.Add(rtt / 2)
		best.Offset, best.RTT = mid.Sub(redisNow), rtt
	}
	return best, nil
}
