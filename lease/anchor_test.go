package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/redis/go-redis/v9"
)

// On a 3-master Cluster, grants on 320 shards record each shard's slot in
// exactly one anchor, served by the slot's own master (the scripts' CRC16
// agrees with the Cluster's), with the lease's expiry as its score: none is
// due before it, all are after. Reanchor finds each recorded, and removes a
// slot whose entries are gone.
func TestClusterAnchorsRecordEveryNewEntry(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client()
	l := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	now := t0.Add(12 * time.Hour)
	slots := map[int]lease.ShardKey{}
	for c := range 40 {
		id := "a" + strconv.Itoa(c)
		mustOpen(t, l, campaign(id, 8_000_000_000, 8), "2026-11-21")
		for s := range 8 {
			k := shardKey(id, "2026-11-21", s)
			if g, err := l.Grant(ctx, grantReq("l"+strconv.Itoa(s), k, 1000, now, ppb/2)); err != nil || g.Granted != 1000 {
				t.Fatalf("grant on %s: %+v, %v", k, g, err)
			}
			slots[lease.Slot(k.String())] = k
		}
	}
	if early, err := l.AnchoredSlots(ctx, now.Add(29*time.Second)); err != nil || len(early) != 0 {
		t.Fatalf("anchored slots due before the leases' expiry: %v, %v", early, err)
	}
	due, err := l.AnchoredSlots(ctx, now.Add(30*time.Second))
	if err != nil || len(due) != len(slots) {
		t.Fatalf("%d anchored slots at the leases' expiry, want %d: %v", len(due), len(slots), err)
	}
	for s, anchors := range due {
		k, ok := slots[s]
		if !ok || len(anchors) != 1 {
			t.Fatalf("slot %d: shard %v, anchors %v", s, k, anchors)
		}
		if a, b := masterOf(t, cc, anchors[0]), masterOf(t, cc, k.RedisKeys()[0]); a != b {
			t.Fatalf("slot %d (%s on %s) recorded in %s on %s", s, k, b, anchors[0], a)
		}
	}
	var list []int
	for s := range slots {
		list = append(list, s)
	}
	empty := (list[0] + 1) % lease.Slots
	for slots[empty] != (lease.ShardKey{}) {
		empty = (empty + 1) % lease.Slots
	}
	found, err := l.Reanchor(ctx, append(list, empty), due)
	if err != nil || len(found) != len(list)+1 {
		t.Fatalf("reanchor: %v, %v", found, err)
	}
	for _, a := range found {
		if want := (lease.SlotAnchor{Slot: a.Slot, Entries: a.Slot != empty, Local: true}); a != want {
			t.Fatalf("reanchor: %+v, want %+v", a, want)
		}
	}
}

func masterOf(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// A rolling upgrade: daemons of the previous release write index entries
// and no anchors. Their leases are still settled by a reconciler of this
// release: one granted before its term is found by the term's first step,
// which reanchors every slot; one granted during the term is found by the
// rotating reanchor within a sweep period (16,384 slots / 55 a step); from
// then on, for a sweep period, every step reads every slot's index keys,
// so the next one is settled by the first step after its expiry. The
// leases are on a campaign the reconciler does not know (its day opened
// then the campaign forgotten), so no sweep of campaigns finds them: only
// the index does. Once no entry without an anchor turned up for a sweep
// period, a step costs its usual hundred-odd commands again.
func TestClusterRollingUpgradeLeasesAreSettled(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client()
	counter := &redistest.Counter{}
	cc.AddHook(counter)
	l := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	mustOpen(t, l, campaign("ghost", 8_000_000_000, 8), "2026-11-21")
	if err := cc.SRem(ctx, "pacer:campaigns", "ghost").Err(); err != nil { // forgotten, as a removed campaign
		t.Fatal(err)
	}
	clock := clocktest.At(t0.Add(12 * time.Hour))
	oldGrant := func(shard int) (lease.ShardKey, int64) {
		k := shardKey("ghost", "2026-11-21", shard)
		return k, l.GrantPreviousReleaseForTest(t, grantReq("old"+strconv.Itoa(shard), k, 1000, clock.Now(), ppb/2))
	}
	settled := func(k lease.ShardKey, want int64) bool {
		t.Helper()
		sh, err := l.ReadShard(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return sh.Leased == 0 && sh.Lost == want
	}
	step := func(rc *reconcile.Reconciler) int64 {
		t.Helper()
		counter.Reset()
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return counter.N()
	}
	// Before the term.
	k, g := oldGrant(0)
	rc := reconcile.New(l, reconcile.Config{Clock: clock, Grace: 5 * time.Second})
	step(rc)
	step(rc)
	clock.Add(36 * time.Second)
	step(rc)
	if !settled(k, g) {
		t.Fatalf("%s: the lease granted before the term is not settled", k)
	}
	// During a term, found by the rotating reanchor.
	rc = reconcile.New(l, reconcile.Config{Clock: clock, Grace: 5 * time.Second})
	step(rc)
	step(rc)
	k, g = oldGrant(1)
	steps := 0
	for !settled(k, g) {
		if steps++; steps > 35+(lease.Slots+54)/55 {
			t.Fatalf("%s: the lease granted during the term is not settled after %d steps", k, steps-1)
		}
		clock.Add(time.Second)
		step(rc)
	}
	t.Logf("the previous release's lease granted during the term: settled by step %d (its expiry and grace: 35)", steps)
	// Found: every slot is read for a sweep period.
	k, g = oldGrant(2)
	clock.Add(36 * time.Second)
	if n := step(rc); n < 2*lease.Slots || !settled(k, g) {
		t.Fatalf("%s: the step after its expiry sent %d commands (every slot read: over %d), settled %v", k, n, 2*lease.Slots, settled(k, g))
	}
	clock.Add(5 * time.Minute)
	step(rc)
	clock.Add(time.Second)
	if n := step(rc); n > 200 {
		t.Fatalf("a step a sweep period after the last entry without an anchor: %d commands, want at most 200", n)
	}
}
