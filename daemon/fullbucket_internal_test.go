package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

// A host whose bucket has every feed open (bucket.MaxFeeds) asks the
// ledger for no new lease: the bucket would refuse it and the host give it
// straight back, a grant and a release that move no money. It waits an
// eighth of a window, as after a shard's answer of nothing, and the shard's
// turn passes (condition 13); a renewal, which frees the feed it fills, is
// still asked. Real
// redis-server; the ledger calls are counted at the client.
func TestFullBucketAsksForNoNewLease(t *testing.T) {
	ctx := context.Background()
	_, _, ledger, _ := proxiedLedger(t)
	d, clock := spendingDaemon(t, ledger, LeaseTiming{})
	c := campaignC(t, d)
	c.loopMu.Lock()
	defer c.loopMu.Unlock()
	ds, s, now := c.day.Load(), c.settings.Load(), clock.Now()
	for len(ds.leases) < bucket.MaxFeeds {
		n := len(ds.leases)
		c.grant(ctx, now, s, ds, 0, 1_000, 0, false, nil)
		if len(ds.leases) != n+1 {
			t.Fatalf("filling the bucket: a grant left %d leases, want %d", len(ds.leases), n+1)
		}
	}
	var calls atomic.Int64
	counted := lease.WithCommandCount(ctx, &calls)
	ds.shardAskedAt[0] = time.Time{}
	c.grant(counted, now, s, ds, 0, 1_000, 0, false, nil)
	if n := calls.Load(); n != 0 || len(ds.leases) != bucket.MaxFeeds {
		t.Fatalf("a grant into a full bucket sent %d Redis commands and left %d leases; want none sent, %d held", n, len(ds.leases), bucket.MaxFeeds)
	}
	if wait := c.cfg.LeaseWindow / 8; ds.nextGrantAt.Before(now.Add(wait)) {
		t.Fatalf("next regular ask at %v; want not before %v (an eighth of a window)", ds.nextGrantAt, now.Add(wait))
	}
	if !ds.shardAskedAt[0].Equal(now) {
		t.Fatalf("the shard passed over was last asked at %v; want its turn passed (%v)", ds.shardAskedAt[0], now)
	}
	if got := c.d.counters.unaskedBucketFull.Load(); got != 1 {
		t.Fatalf("leases_unasked_bucket_full %d, want 1", got)
	}
	id, _ := ds.oldestLease()
	shard := ds.leases[id].shard
	ending, more := c.renewEarly(now, ds, id)
	c.grant(counted, now, s, ds, shard, 1_000+more, 0, false, ending)
	if n := calls.Load(); n == 0 || len(ds.leases) != bucket.MaxFeeds {
		t.Fatalf("a renewal into a full bucket sent %d Redis commands and left %d leases; want it asked, %d held", n, len(ds.leases), bucket.MaxFeeds)
	}
}
