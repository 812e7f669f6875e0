package lease_test

import (
	"errors"
	"testing"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// Behind is a step table: lower counters, a missing key and another
// incarnation not past the recorded counter are behind; equal and ahead
// (Redis advanced, the record did not follow) are not.
func TestWatermarkBehind(t *testing.T) {
	rec := lease.Watermark{Epoch: 7, Counter: 10}
	for _, tc := range []struct {
		redis lease.Watermark
		want  bool
	}{
		{lease.Watermark{Epoch: 7, Counter: 10}, false},
		{lease.Watermark{Epoch: 7, Counter: 11}, false},
		{lease.Watermark{Epoch: 7, Counter: 9}, true},
		{lease.Watermark{}, true}, // the key is gone
		{lease.Watermark{Epoch: 8, Counter: 10}, true},
		{lease.Watermark{Epoch: 8, Counter: 3}, true},
		{lease.Watermark{Epoch: 8, Counter: 11}, false},
	} {
		if got := tc.redis.Behind(rec); got != tc.want {
			t.Errorf("%v.Behind(%v) = %v, want %v", tc.redis, rec, got, tc.want)
		}
	}
	if (lease.Watermark{}).Behind(lease.Watermark{}) {
		t.Error("nothing recorded: nothing is behind")
	}
}

// On a single server the watermark is one key: created with a random
// epoch, advanced only from what the caller read (a restore in between is
// refused, not overwritten), idempotent on a retry, refused to an older
// fence; a restored copy reads behind the recorded value.
func TestWatermarkAdvanceSingle(t *testing.T) {
	l, srv := newLedger(t)
	ms, err := l.Masters(ctx)
	if err != nil || len(ms) != 1 || ms[0].Name != "redis" {
		t.Fatalf("masters = %+v, %v", ms, err)
	}
	m := ms[0]
	if !m.Owns(lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: 3}) {
		t.Fatal("a single server holds every shard")
	}
	if _, ok, err := l.ReadWatermark(ctx, m); ok || err != nil {
		t.Fatalf("fresh Redis: ok=%v, %v", ok, err)
	}
	w1, err := l.AdvanceWatermark(ctx, m, lease.Watermark{}, false, 1, 5)
	if err != nil || w1.Counter != 1 || w1.Epoch == 0 {
		t.Fatalf("create = %v, %v", w1, err)
	}
	// A second create draws another epoch: it is not a retry of the first
	// (whose arguments, epoch included, runScript sends again), and finds
	// the key there.
	if again, err := l.AdvanceWatermark(ctx, m, lease.Watermark{}, false, 1, 5); !errors.Is(err, lease.ErrWatermarkMoved) || again != w1 {
		t.Fatalf("a second create = %v, %v; want ErrWatermarkMoved and %v", again, err, w1)
	}
	got, ok, err := l.ReadWatermark(ctx, m)
	if err != nil || !ok || got != w1 {
		t.Fatalf("read %v %v %v, want %v", got, ok, err, w1)
	}
	snap := srv.Snapshot("pacer:watermark")
	w2, err := l.AdvanceWatermark(ctx, m, w1, true, 2, 5)
	if err != nil || w2 != (lease.Watermark{Epoch: w1.Epoch, Counter: 2}) {
		t.Fatalf("advance = %v, %v", w2, err)
	}
	if retry, err := l.AdvanceWatermark(ctx, m, w1, true, 2, 5); err != nil || retry != w2 {
		t.Fatalf("retry = %v, %v; want %v again", retry, err, w2)
	}
	if _, err := l.AdvanceWatermark(ctx, m, w1, true, 3, 5); !errors.Is(err, lease.ErrWatermarkMoved) {
		t.Fatalf("advance from a stale read: %v; want ErrWatermarkMoved", err)
	}
	if _, err := l.AdvanceWatermark(ctx, m, w2, true, 3, 4); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("advance by an older fence: %v; want ErrFenced", err)
	}
	srv.Restore(snap, "pacer:watermark")
	back, _, err := l.ReadWatermark(ctx, m)
	if err != nil || !back.Behind(w2) {
		t.Fatalf("restored %v, %v: want behind %v", back, err, w2)
	}
	if _, err := l.AdvanceWatermark(ctx, m, w2, true, 3, 5); !errors.Is(err, lease.ErrWatermarkMoved) {
		t.Fatalf("advance of a restored watermark from the recorded value: %v; want ErrWatermarkMoved", err)
	}
	if err := srv.Client().Del(ctx, "pacer:watermark").Err(); err != nil {
		t.Fatal(err)
	}
	if gone, ok, err := l.ReadWatermark(ctx, m); ok || err != nil || !gone.Behind(w2) {
		t.Fatalf("deleted: %v %v %v; want none, behind", gone, ok, err)
	}
}

// On a Cluster there is one watermark per master, named by the first slot
// it serves and kept in a slot it serves; the masters' slots partition the
// shards.
func TestWatermarkPerClusterMaster(t *testing.T) {
	nodes := startCluster(t, redisproc.Options{}, redisproc.Options{})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}, ContextTimeoutEnabled: true})
	defer cc.Close()
	l := lease.New(cc, lease.Config{}, nil)
	ms, err := l.Masters(ctx)
	if err != nil || len(ms) != 2 || ms[0].Name != "slot-0" || ms[1].Name != "slot-8192" {
		t.Fatalf("masters = %+v, %v", ms, err)
	}
	for i, m := range ms {
		w, err := l.AdvanceWatermark(ctx, m, lease.Watermark{}, false, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Each master has exactly its own key.
		var c *redis.Client
		for _, n := range nodes {
			if n.Addr == m.Addr {
				c = n.Client()
			}
		}
		if c == nil {
			t.Fatalf("master %s at %s is not one of the nodes", m.Name, m.Addr)
		}
		keys, err := c.Keys(ctx, "pacer:watermark*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("master %d holds watermark keys %v, %v; want its own", i, keys, err)
		}
		got, ok, err := l.ReadWatermark(ctx, m)
		if err != nil || !ok || got != w {
			t.Fatalf("read %v %v %v, want %v", got, ok, err, w)
		}
	}
	owned := [2]int{}
	for i := range 64 {
		k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: i}
		a, b := ms[0].Owns(k), ms[1].Owns(k)
		if a == b {
			t.Fatalf("shard %s owned by both or neither: %v %v", k, a, b)
		}
		if a {
			owned[0]++
		} else {
			owned[1]++
		}
	}
	if owned[0] == 0 || owned[1] == 0 {
		t.Fatalf("64 shards split %v between the masters", owned)
	}
}
