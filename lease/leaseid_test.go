package lease_test

import (
	"errors"
	"testing"

	"github.com/pacer/pacer/lease"
)

// A lease id the shard knows is answered only to the holder that owns it:
// a second holder asking for the same id (two daemons with one host name
// whose ids collided) gets nothing, by grant or by renewal, and the first
// holder's retry still gets its lease.
func TestKnownLeaseIDAnsweredOnlyToItsHolder(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	now := t0.Add(12 * 3600e9)
	g, err := l.Grant(ctx, grantReq("dup-1", k, 500_000, now, ppb/2))
	if err != nil || g.Granted != 500_000 {
		t.Fatalf("grant = %+v, %v", g, err)
	}
	other := grantReq("dup-1", k, 500_000, now, ppb/2)
	other.Holder = "h2"
	g, err = l.Grant(ctx, other)
	if !errors.Is(err, lease.ErrLeaseIDTaken) || g.Granted != 0 {
		t.Fatalf("another holder's grant of a known id = %+v, %v; want nothing, ErrLeaseIDTaken", g, err)
	}
	if _, err := l.Grant(ctx, grantReq("dup-2", k, 100_000, now, ppb/2)); err != nil {
		t.Fatal(err)
	}
	renew := grantReq("dup-1", k, 500_000, now, ppb/2)
	renew.Holder = "h2"
	g, err = l.Renew(ctx, "dup-2", 100_000, renew)
	if !errors.Is(err, lease.ErrLeaseIDTaken) || g.Granted != 0 {
		t.Fatalf("another holder's renewal into a known id = %+v, %v; want nothing, ErrLeaseIDTaken", g, err)
	}
	g, err = l.Grant(ctx, grantReq("dup-1", k, 500_000, now, ppb/2))
	if err != nil || g.Granted != 500_000 {
		t.Fatalf("the owner's retry = %+v, %v; want its lease", g, err)
	}
	if tot := mustBalance(t, l, "c", day); tot.Leased != 500_000 || tot.Spent != 0 {
		t.Fatalf("totals %+v: want only the owner's lease leased, dup-2 given back whole", tot)
	}
}
