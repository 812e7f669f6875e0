package reconcile_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// A full pass cut off by a lost term is resumed by the next leader from the
// cursor the first recorded after each chunk of 1,024 campaigns: the
// campaigns the first leader looked at carry its fence, the next leader
// looks at the others only, and its pass then counts as done. Before, the
// next leader started again from the first campaign, so a pass longer than
// a term never finished.
func TestFullPassResumesAfterALostTerm(t *testing.T) {
	const n = 1_500
	f, counter, ledger := scaleFixtureDays(t, n, false)
	f.clock.Set(midnight.Add(12 * time.Hour))
	ids := make([]string, n)
	for i := range n {
		ids[i] = "c" + strconv.Itoa(i)
	}
	slices.Sort(ids)

	// The first leader loses its term as its second chunk begins.
	term, lose := context.WithCancel(ctx)
	defer lose()
	var gates atomic.Int32
	rc1 := reconcile.New(ledger, reconcile.Config{Clock: f.clock, Grace: 4 * time.Second,
		Gate: func(context.Context) error {
			if gates.Add(1) == 2 {
				lose()
			}
			return nil
		}})
	if err := rc1.Step(term, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first leader's full pass: %v, want it cut off", err)
	}
	cur, ok, err := ledger.LoadPassCursor(ctx)
	if err != nil || !ok || cur.After != ids[1023] || cur.Done || cur.Fence != 5 || cur.Campaigns != n {
		t.Fatalf("cursor after the lost term: %+v, %v, %v; want after %s, not done", cur, ok, err, ids[1023])
	}

	rc2 := reconcile.New(ledger, reconcile.Config{Clock: f.clock, Grace: 4 * time.Second})
	counter.n.Store(0)
	if err := rc2.Step(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// Loading the term reads every campaign once; the pass then costs 3
	// commands a campaign and one a shard (the survey script, which also
	// records the fence), batched: not a survey of 27 reads and 8 fence
	// scripts each.
	t.Logf("the resumed pass: %d campaigns, %d Redis commands", n-1024, counter.n.Load())
	if got, most := counter.n.Load(), int64(n+50+(n-1024)*(3+8)); got > most {
		t.Fatalf("the resumed pass cost %d Redis commands, want at most %d", got, most)
	}
	if cur, _, _ := ledger.LoadPassCursor(ctx); cur.After != ids[n-1] || !cur.Done || cur.Fence != 6 || !cur.Started.Equal(midnight.Add(12*time.Hour)) {
		t.Fatalf("cursor after the resumed pass: %+v", cur)
	}
	fences := map[string]int{}
	for i, id := range ids {
		v, err := f.redis.Client().HGet(ctx, "pacer:{"+id+"/"+day+"/0}:state", "fence").Result()
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		want := "6"
		if i < 1024 {
			want = "5"
		}
		if v != want {
			t.Fatalf("%s (#%d in the pass's order) carries fence %s, want %s", id, i, v, want)
		}
		fences[v]++
	}
	t.Logf("campaigns by the fence they carry: %v", fences)
	// The next step is a step, not a pass from the start: it asks about
	// the days of (at most 512 of) the campaigns the first leader looked
	// at, 3 commands each in one round trip, where a full pass costs
	// 11 a campaign.
	counter.n.Store(0)
	if err := rc2.Step(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got > 512*3+300 { // and the sweep's slice: 5 campaigns, 11 each
		t.Fatalf("the step after the resumed pass cost %d Redis commands: not a step", got)
	}
	// A deposed leader's late write is refused on either part.
	for _, id := range []string{ids[0], ids[n-1]} {
		_, err := f.ledger.Settle(ctx, lease.ShardKey{Campaign: id, Day: day, Shard: 0}, f.clock.Now(), time.Second, 4)
		if !errors.Is(err, lease.ErrFenced) {
			t.Fatalf("%s: a settle with a stale fence: %v, want ErrFenced", id, err)
		}
	}
}
