package lease_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// Every key a campaign-day creates expires (the ledger's memory is bounded by
// its retention), whatever wrote it: the day's open, grants, renewals,
// releases, settlements, rebalancing moves, fair-share records and demand
// counts. Only the campaign's settings and the set of ids are kept for good.
func TestEveryDayKeyExpires(t *testing.T) {
	l, srv := newLedger(t)
	const day = "2026-11-21"
	c := campaign("c", 86_400_000_000, 4)
	mustOpen(t, l, c, day)
	now := t0.Add(12 * time.Hour)
	for shard := range 4 {
		k := lease.ShardKey{Campaign: "c", Day: day, Shard: shard}
		id := "l" + string(rune('0'+shard))
		r := grantReq(id, k, 1_000_000, now, ppb/2)
		r.Demand, r.DemandTTL = 1000, time.Minute
		if _, err := l.Grant(ctx, r); err != nil {
			t.Fatal(err)
		}
		r2 := grantReq(id+"r", k, 1_000_000, now.Add(15*time.Second), ppb/2+ppb/1000)
		if _, err := l.Renew(ctx, id, 500, r2); err != nil {
			t.Fatal(err)
		}
		switch shard {
		case 0:
			if _, err := l.Release(ctx, k, id+"r", 100, now.Add(20*time.Second)); err != nil {
				t.Fatal(err)
			}
		case 1: // left to expire and be settled
			if _, err := l.Settle(ctx, k, now.Add(2*time.Minute), 5*time.Second, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := l.Move(ctx, "c", day, 2, 3, 1000, "m1", 0, now.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Keys deleted when they empty, then created again by a later call: a
	// shard's leases and exp keys (its last lease released, then a new
	// grant), its fair-share records (all of them forgotten, then a new
	// one) and keys a reassert creates. The ledger sets a key's expiry when
	// a call may have created it, not on every call.
	k3 := lease.ShardKey{Campaign: "c", Day: day, Shard: 3}
	if _, err := l.Release(ctx, k3, "l3r", 0, now.Add(4*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n, _ := srv.Client().Exists(ctx, "pacer:{c/"+day+"/3}:leases", "pacer:{c/"+day+"/3}:fair").Result(); n != 1 {
		t.Fatalf("shard 3 after its last release: %d of its leases and fair keys exist, want 1 (the fair records)", n)
	}
	r := grantReq("l3b", k3, 1_000_000, now.Add(5*time.Minute), ppb/2+ppb/100)
	r.Demand, r.DemandTTL = 1000, time.Minute // the shard's records expired at now+1m15s and are dropped
	if _, err := l.Grant(ctx, r); err != nil {
		t.Fatal(err)
	}
	k0 := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	if got, _, err := l.Reassert(ctx, k0, lease.LeaseRecord{ID: "kept", Amount: 500, Holder: "h2", Expiry: now.Add(6 * time.Minute)}, now.Add(5*time.Minute)); err != nil || got != lease.Rerecorded {
		t.Fatalf("reassert on shard 0 (no lease left) = %v, %v; want re-recorded", got, err)
	}
	if _, err := l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: 48, Requests: 10, Allowed: 9, Denied: 1, MicrosAsked: 10_000, BidMicros: 1000}); err != nil {
		t.Fatal(err)
	}
	// A done key first written by a renewal (shard 0) and by a grant that
	// settles an expired lease (shard 1), with no call after that would
	// look at every key.
	mustOpen(t, l, campaign("d", 86_400_000_000, 2), day)
	d0, d1 := lease.ShardKey{Campaign: "d", Day: day, Shard: 0}, lease.ShardKey{Campaign: "d", Day: day, Shard: 1}
	if _, err := l.Grant(ctx, grantReq("a", d0, 1000, now, ppb/2)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Renew(ctx, "a", 0, grantReq("b", d0, 1000, now.Add(15*time.Second), ppb/2+ppb/1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grant(ctx, grantReq("x", d1, 1000, now, ppb/2)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grant(ctx, grantReq("y", d1, 1000, now.Add(2*time.Minute), ppb/2+ppb/100)); err != nil {
		t.Fatal(err)
	}
	if n, _ := srv.Client().HLen(ctx, "pacer:{d/"+day+"/1}:done").Result(); n != 1 {
		t.Fatalf("shard d/1: %d leases settled by the grant, want 1", n)
	}
	permanentD := []string{"pacer:campaign:{d}", "pacer:days:{d}"}
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Kept for good: the settings, the set of ids and the change stream
	// (capped); the reconciler's indexes (their entries are removed as
	// shards are settled); the campaign's days hash (old days' fields are
	// pruned as new days open: TestOldDayRecordsArePruned).
	permanent := map[string]bool{"pacer:campaign:{c}": true, "pacer:campaigns": true, "pacer:campaigns:changes": true,
		"pacer:days:{c}": true, "pacer:idx:due": true, "pacer:idx:low": true}
	for _, k := range permanentD {
		permanent[k] = true
	}
	checked := 0
	for _, key := range keys {
		if permanent[key] || !strings.HasPrefix(key, "pacer:") {
			continue
		}
		ttl, err := srv.Client().PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 {
			t.Errorf("key %s has no expiry (PTTL %v)", key, ttl)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d day keys found (%v): the day did not write what this test means to check", checked, keys)
	}
	t.Logf("%d keys expire", checked)
}

// The campaign's days hash keeps a few fields per day (the day's shard
// count, carry, curve, exhaustion claim...): a day's fields are pruned once
// its keys have expired, when a later day opens, and the bid stays.
func TestOldDayRecordsArePruned(t *testing.T) {
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 24 * time.Hour}, nil)
	c := campaign("c", 86_400_000, 2)
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := l.SetBid(ctx, "c", 1000); err != nil {
		t.Fatal(err)
	}
	open := func(day string) {
		start, _ := time.Parse(time.DateOnly, day)
		if _, err := l.OpenDay(ctx, c, day, start, start); err != nil {
			t.Fatal(err)
		}
		if _, err := l.ClaimExhausted(ctx, "c", day, "h"); err != nil {
			t.Fatal(err)
		}
	}
	open("2026-11-01")
	open("2026-11-15")
	open("2026-11-18") // keeps 11-15: 3 days old, inside 48 h + 1 day of retention + 2 days' margin
	fields, err := srv.Client().HKeys(ctx, "pacer:days:{c}").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(fields, " ")
	for _, f := range []string{"2026-11-15", "2026-11-15:exhausted", "2026-11-18", ":bid"} {
		if !slices.Contains(fields, f) {
			t.Errorf("field %s pruned too early: %s", f, got)
		}
	}
	for _, f := range fields {
		if strings.HasPrefix(f, "2026-11-01") {
			t.Errorf("field %s of a day long expired was not pruned: %s", f, got)
		}
	}
	if b, err := l.Bid(ctx, "c"); err != nil || b != 1000 {
		t.Fatalf("bid after pruning = %d, %v", b, err)
	}
	// The pruned day is never opened again, even by a caller whose clock
	// says it is that day's time: its budget may have been spent.
	start, _ := time.Parse(time.DateOnly, "2026-11-01")
	if _, err := l.OpenDay(ctx, c, "2026-11-01", start, start.Add(17*24*time.Hour)); !errors.Is(err, lease.ErrDayExpired) {
		t.Fatalf("re-opening a day past its retention: err = %v, want ErrDayExpired", err)
	}
}

// A key a writer failed to give its expiry (here: PERSIST) gets it back
// within EXPIRY_SWEEP (64) writes of its shard: the ledger re-asserts every
// key's expiry on every 64th write, not on every call.
func TestExpirySweepRestoresAMissingExpiry(t *testing.T) {
	l, srv := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 86_400_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	now := t0.Add(12 * time.Hour)
	// Two leases: one is renewed, the other (held for an hour) keeps the
	// leases key from emptying, which would delete it.
	for _, id := range []string{"held", "l0"} {
		r := grantReq(id, k, 1000, now, ppb/2)
		r.Expiry = now.Add(time.Hour)
		if _, err := l.Grant(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	key := "pacer:{c/" + day + "/0}:leases"
	if ok, err := srv.Client().Persist(ctx, key).Result(); err != nil || !ok {
		t.Fatalf("persist %s: %v %v", key, ok, err)
	}
	prev, restored := "l0", 0
	for i := 1; i <= 64 && restored == 0; i++ {
		id := "l" + strconv.Itoa(i)
		now = now.Add(time.Second)
		if _, err := l.Renew(ctx, prev, 0, grantReq(id, k, 1000, now, ppb/2+int64(i))); err != nil {
			t.Fatal(err)
		}
		prev = id
		if ttl, err := srv.Client().PTTL(ctx, key).Result(); err != nil {
			t.Fatal(err)
		} else if ttl > 0 {
			restored = i
		}
	}
	if restored == 0 {
		t.Fatalf("%s has no expiry after 64 writes", key)
	}
	if restored == 1 {
		t.Fatalf("%s got its expiry back at the first renewal: the test no longer shows the sweep", key)
	}
	t.Logf("expiry restored at renewal %d", restored)
}
