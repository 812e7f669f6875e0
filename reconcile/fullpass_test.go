package reconcile_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	f.Clock.Set(midnight.Add(12 * time.Hour))
	ids := passOrder(n)

	// The first leader loses its term as its second chunk begins.
	term, lose := context.WithCancel(ctx)
	defer lose()
	var gates atomic.Int32
	rc1 := reconcile.New(ledger, reconcile.Config{Clock: f.Clock, Grace: 4 * time.Second,
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

	rc2 := reconcile.New(ledger, reconcile.Config{Clock: f.Clock, Grace: 4 * time.Second})
	counter.Reset()
	if err := rc2.Step(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// Loading the term reads every campaign once; the pass then costs 3
	// commands a campaign and one a shard (the survey script, which also
	// records the fence), batched: not a survey of 27 reads and 8 fence
	// scripts each.
	t.Logf("the resumed pass: %d campaigns, %d Redis commands", n-1024, counter.N())
	if got, most := counter.N(), int64(n+50+(n-1024)*(3+8)); got > most {
		t.Fatalf("the resumed pass cost %d Redis commands, want at most %d", got, most)
	}
	if cur, _, _ := ledger.LoadPassCursor(ctx); cur.After != ids[n-1] || !cur.Done || cur.Fence != 6 || !cur.Started.Equal(midnight.Add(12*time.Hour)) {
		t.Fatalf("cursor after the resumed pass: %+v", cur)
	}
	fences := map[string]int{}
	for i, id := range ids {
		v, err := f.Redis.Client().HGet(ctx, "pacer:{"+id+"/"+day+"/0}:state", "fence").Result()
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
	counter.Reset()
	if err := rc2.Step(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if got := counter.N(); got > 512*3+300 { // and the sweep's slice: 5 campaigns, 11 each
		t.Fatalf("the step after the resumed pass cost %d Redis commands: not a step", got)
	}
	// A deposed leader's late write is refused on either part.
	for _, id := range []string{ids[0], ids[n-1]} {
		_, err := f.Ledger.Settle(ctx, lease.ShardKey{Campaign: id, Day: day, Shard: 0}, f.Clock.Now(), time.Second, 4)
		if !errors.Is(err, lease.ErrFenced) {
			t.Fatalf("%s: a settle with a stale fence: %v, want ErrFenced", id, err)
		}
	}
}

// A leader is killed (its process stops: no more passes, its etcd session
// neither renewed nor resigned) halfway through its term's first full pass;
// the next candidate is elected once the session expires and resumes the
// pass from the cursor: the campaigns the first leader looked at keep its
// fence, the rest carry the second's, and the second's pass is done. At
// 3,000 campaigns here; PACER_BENCH_SCALE=1 runs it at 100,000 (make
// bench-scale: the setup alone takes minutes).
func TestFullPassResumesAfterTheLeaderIsKilled(t *testing.T) {
	n := 3_000
	if os.Getenv("PACER_BENCH_SCALE") != "" {
		n = 100_000
	}
	f, _, ledger := scaleFixtureDays(t, n, false)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	ids := passOrder(n)
	_, etcdClient := startEtcd(t)

	start := time.Now()
	at := killLeaderHalfway(t, f, ledger, etcdClient(), ids)
	t.Logf("killed after %s (%d of %d campaigns, %v), fence %d", at.After, sort.SearchStrings(ids, at.After)+1, n, time.Since(start), at.Fence)

	start = time.Now()
	// Once its pass is done, the second leader's gate stays closed: the
	// sweep that follows a pass would stamp campaigns from the roster's
	// start with its fence and blur which leader's pass reached them.
	finished := func() (lease.PassCursor, bool, error) {
		cur, ok, err := ledger.LoadPassCursor(ctx)
		return cur, err == nil && ok && cur.Done && cur.Fence > at.Fence, err
	}
	rc2 := reconcile.New(ledger, reconcile.Config{Holder: "r2", Clock: f.Clock, Grace: 4 * time.Second, Interval: 50 * time.Millisecond,
		Gate: func(context.Context) error {
			if _, done, _ := finished(); done {
				return errors.New("the test's pass is done")
			}
			return nil
		}})
	run2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	client2 := etcdClient()
	defer client2.Close()
	go func() { done2 <- rc2.Run(run2, reconcile.NewEtcdElector(client2, "r2", 1)) }()
	deadline := time.Now().Add(10 * time.Minute)
	var cur lease.PassCursor
	for {
		c, done, err := finished()
		if cur = c; done {
			break
		}
		if time.Now().After(deadline) {
			stop2()
			<-done2
			t.Fatalf("the second leader did not finish the pass in 10 minutes: cursor %+v, %v", cur, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop2()
	<-done2
	t.Logf("the second leader elected and its pass done in %v", time.Since(start))
	if !cur.Started.Equal(at.Started) || cur.After != ids[len(ids)-1] {
		t.Fatalf("cursor after the second leader's pass: %+v; want the first's pass (started %v) finished", cur, at.Started)
	}
	checkFencesSplit(t, f, ids, sort.SearchStrings(ids, at.After)+1, at.Fence, cur.Fence)
	timeFullPassAndStep(t, f, ledger, cur.Fence+1)
}

// timeFullPassAndStep times a new leader's (fence) first full pass over
// every campaign and the index-driven step after it, and logs their Redis
// commands; it fails if the step costs what a pass does.
func timeFullPassAndStep(t *testing.T, f *fixture, ledger *lease.Ledger, fence int64) {
	t.Helper()
	counter := &redistest.Counter{}
	c := f.Redis.Client()
	c.AddHook(counter)
	rc := reconcile.New(lease.New(c, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil), reconcile.Config{Clock: f.Clock, Grace: 4 * time.Second})
	f.Clock.Add(time.Second)
	start := time.Now()
	if err := rc.Pass(ctx, fence); err != nil {
		t.Fatal(err)
	}
	full, fullCmds := time.Since(start), counter.Take()
	t.Logf("a new leader's full pass: %v, %d Redis commands (load %s)", full.Round(time.Millisecond), fullCmds, loadAverage())
	f.Clock.Add(time.Second)
	start = time.Now()
	if err := rc.Step(ctx, fence); err != nil {
		t.Fatal(err)
	}
	step, stepCmds := time.Since(start), counter.N()
	t.Logf("the step after it: %v, %d Redis commands (load %s)", step.Round(time.Millisecond), stepCmds, loadAverage())
	if stepCmds*10 > fullCmds {
		t.Fatalf("the step cost %d Redis commands, the full pass %d: not an index-driven step", stepCmds, fullCmds)
	}
}

// killLeaderHalfway elects a reconciler alone (client its etcd client) and
// kills it, from its gate, once its full pass's cursor is past half of ids.
// It returns the cursor the pass left.
func killLeaderHalfway(t *testing.T, f *fixture, ledger *lease.Ledger, client *clientv3.Client, ids []string) lease.PassCursor {
	t.Helper()
	run, kill := context.WithCancel(ctx)
	defer kill()
	killed := make(chan lease.PassCursor, 1)
	rc := reconcile.New(ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Grace: 4 * time.Second, Interval: 50 * time.Millisecond,
		Gate: func(context.Context) error {
			if cur, ok, err := ledger.LoadPassCursor(ctx); err == nil && ok && cur.After >= ids[len(ids)/2] && run.Err() == nil {
				client.Close() // first: the session is neither renewed nor resigned
				kill()
				killed <- cur
			}
			return nil
		}})
	done := make(chan error, 1)
	go func() { done <- rc.Run(run, reconcile.NewEtcdElector(client, "r1", 1)) }()
	var at lease.PassCursor
	select {
	case at = <-killed:
	case err := <-done:
		t.Fatalf("the first leader stopped before it was killed: %v", err)
	case <-time.After(10 * time.Minute):
		t.Fatal("the first leader's full pass did not reach half of the campaigns in 10 minutes")
	}
	<-done
	if at.Done || at.Fence == 0 {
		t.Fatalf("cursor when the first leader was killed: %+v", at)
	}
	// Its chunk in flight may have reached Redis after the cursor was read.
	at, _, _ = ledger.LoadPassCursor(ctx)
	return at
}

// checkFencesSplit checks that the first resumed campaigns of ids (in the
// pass's order) carry a fence of the first leader's terms (at most first:
// a term it lost under load, and won again, resumed its own pass too) and
// the rest one of the second leader's (above first, at most second: a term
// it lost under load resumed from its own cursor as well).
func checkFencesSplit(t *testing.T, f *fixture, ids []string, resumed int, first, second int64) {
	t.Helper()
	p := f.Redis.Client().Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = p.HGet(ctx, "pacer:{"+id+"/"+day+"/0}:state", "fence")
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	fences := map[int64]int{}
	for i, c := range cmds {
		got, err := strconv.ParseInt(c.Val(), 10, 64)
		ok := err == nil && got > first && got <= second
		if i < resumed {
			ok = err == nil && got > 0 && got <= first
		}
		if !ok {
			t.Fatalf("%s (#%d in the pass's order; the cursor was after #%d) carries fence %q; want the first leader's (at most %d) before the cursor, the second's (%d to %d) after",
				ids[i], i, resumed-1, c.Val(), first, first+1, second)
		}
		fences[got]++
	}
	t.Logf("campaigns by the fence they carry: %v", fences)
}

// passOrder is the ids of scaleFixture's n campaigns in a full pass's
// order (sorted).
func passOrder(n int) []string {
	ids := make([]string, n)
	for i := range n {
		ids[i] = "c" + strconv.Itoa(i)
	}
	slices.Sort(ids)
	return ids
}
