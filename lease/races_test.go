package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// loseReplies is a go-redis hook that lets the next n scripts run on the
// server and then reports a network error instead of their reply, as a
// connection reset between the script and its reply would.
// With alternate set, every other script loses its reply instead: each
// first attempt, so that every retry succeeds.
type loseReplies struct {
	n         atomic.Int64
	alternate atomic.Bool
	calls     atomic.Int64
}

func (h *loseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *loseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if err != nil || (name != "evalsha" && name != "eval" && name != "fcall") {
			return err
		}
		if h.alternate.Load() && h.calls.Add(1)%2 == 1 || h.n.Add(-1) >= 0 {
			return &net.OpError{Op: "read", Net: "unix", Err: errors.New("connection reset by peer (injected)")}
		}
		return err
	}
}

// A script whose reply is lost runs again under the same op id: a raise of
// the day, applied to every shard with every reply lost once, lands once.
func TestLostRepliesApplyOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	hook := &loseReplies{}
	rdb.AddHook(hook)
	l := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 1_000_000, 4), day)

	hook.alternate.Store(true) // every script's first reply is lost
	got, err := l.AdjustDayOp(ctx, "c", day, "raise-1", 2_000_000, t0)
	if err != nil || got != 2_000_000 {
		t.Fatalf("raise with every first reply lost = %d, %v", got, err)
	}
	if calls := hook.calls.Load(); calls < 12 {
		t.Fatalf("%d scripts ran: the hook did not lose replies", calls)
	}
	hook.alternate.Store(false)
	if tot := mustBalance(t, l, "c", day); tot.Budget != 2_000_000 {
		t.Fatalf("after a raise whose every reply was lost once: %+v; want 2,000,000", tot)
	}
	// The whole day op, every reply lost once: 2,000,000 -> 3,000,000, once.
	hook.n.Store(1_000)
	if _, err := l.AdjustDayOp(ctx, "c", day, "raise-2", 3_000_000, t0); err == nil {
		t.Fatal("every reply lost: want an error")
	}
	hook.n.Store(0)
	got, err = l.AdjustDayOp(ctx, "c", day, "raise-2", 3_000_000, t0)
	if err != nil || got != 3_000_000 {
		t.Fatalf("retried op = %d, %v", got, err)
	}
	if tot := mustBalance(t, l, "c", day); tot.Budget != 3_000_000 {
		t.Fatalf("after the retried op: %+v", tot)
	}
	// A grant and a release whose replies are lost are retried by lease id.
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	hook.n.Store(1)
	g, err := l.Grant(ctx, grantReq("L", k, 100_000, t0.Add(12*time.Hour), ppb/2))
	if err != nil || g.Granted != 100_000 {
		t.Fatalf("grant with a lost reply = %+v, %v", g, err)
	}
	hook.n.Store(1)
	if _, err := l.Release(ctx, k, "L", 40_000, t0.Add(12*time.Hour)); err != nil {
		t.Fatalf("release with a lost reply: %v", err)
	}
	if tot := mustBalance(t, l, "c", day); tot.Spent != 60_000 || tot.Leased != 0 {
		t.Fatalf("after grant and release: %+v", tot)
	}
}

// A day is opened from the plan decided once from the stored campaign, never
// from an opener's cached copy: openers holding a stale budget and another
// shard count, racing, fund the day once, with the stored settings.
func TestRacingOpenersFundTheDayOnce(t *testing.T) {
	for round := range 20 {
		l, _ := newLedger(t)
		day := fmt.Sprintf("2026-11-%02d", 1+round)
		stale := campaign("c", 12_000_000, 3)
		if _, err := l.PutCampaign(ctx, stale); err != nil {
			t.Fatal(err)
		}
		// The operator cuts the budget and changes the shard count just
		// before midnight; most openers still hold the old settings.
		if _, err := l.PutCampaign(ctx, campaign("c", 8_000_000, 5)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var bad atomic.Int64
		for i := range 8 {
			c := stale
			if i%3 == 0 {
				c = campaign("c", 8_000_000, 5)
			}
			wg.Go(func() {
				n, err := l.OpenDay(ctx, c, day, t0, t0)
				if err != nil || n != 5 {
					t.Errorf("opener %d: %d shards, %v; want 5", i, n, err)
					bad.Add(1)
				}
			})
		}
		wg.Wait()
		tot := mustBalance(t, l, "c", day)
		if tot.Budget != 8_000_000 || tot.Locked != 8_000_000 || bad.Load() > 0 {
			t.Fatalf("round %d: day funded with %+v; want exactly the stored 8,000,000", round, tot)
		}
		if b, err := l.DayBudget(ctx, "c", day); err != nil || b != 8_000_000 {
			t.Fatalf("round %d: day budget %d, %v", round, b, err)
		}
	}
}

// Closing a day before its carry-over: a grant racing the close either lands
// before it (and the carry waits for its release) or is refused; the carry
// is exactly what the closing cuts took, never also held by a lease.
func TestCarryOverRacingALateGrant(t *testing.T) {
	l, _ := newLedger(t)
	const day, next = "2026-11-21", "2026-11-22"
	c := campaign("c", 1_000_000, 2)
	c.CarryOver = true
	mustOpen(t, l, c, day)
	if _, err := l.OpenDay(ctx, c, next, t0.Add(24*time.Hour), t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	end := t0.Add(24*time.Hour - time.Second)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	if _, err := l.Grant(ctx, grantReq("early", k, 300_000, end, ppb)); err != nil {
		t.Fatal(err)
	}
	// The carry waits while a lease of the day is out; the shards are closed.
	if _, err := l.CarryOver(ctx, "c", day, next, end); !errors.Is(err, lease.ErrCarryNotReady) {
		t.Fatalf("carry with a lease out: %v; want ErrCarryNotReady", err)
	}
	// A late grant (a daemon whose clock is behind) is refused: the day is closed.
	if g, err := l.Grant(ctx, grantReq("late", lease.ShardKey{Campaign: "c", Day: day, Shard: 1}, 400_000, end, ppb)); !errors.Is(err, lease.ErrDayClosed) || g.Granted != 0 {
		t.Fatalf("late grant = %+v, %v; want ErrDayClosed", g, err)
	}
	if _, err := l.Release(ctx, k, "early", 100_000, end); err != nil {
		t.Fatal(err)
	}
	var carried int64
	for range 2 { // the second call moves nothing more
		n, err := l.CarryOver(ctx, "c", day, next, end)
		if err != nil || (carried != 0 && n != carried) {
			t.Fatalf("carry = %d, %v", n, err)
		}
		carried = n
	}
	if carried != 800_000 {
		t.Fatalf("carried %d; want the 800,000 neither spent nor leased", carried)
	}
	closed, nextDay := mustBalance(t, l, "c", day), mustBalance(t, l, "c", next)
	if closed.Budget != 200_000 || closed.Spent != 200_000 || nextDay.Budget != 1_800_000 {
		t.Fatalf("closed day %+v, next day %+v", closed, nextDay)
	}
	if closed.Budget+nextDay.Budget != 2_000_000 {
		t.Fatalf("two days of 1,000,000 fund %d", closed.Budget+nextDay.Budget)
	}
}

// A cut lands where budget is left to grant: with one shard nearly empty and
// another full, the day cannot grant more than the new budget, and only a
// cut deeper than what is left is owed, by the shards holding leases.
func TestCutLandsWhereBudgetIsLeft(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 2_000_000, 2), day)
	end := t0.Add(24*time.Hour - time.Minute)
	k0 := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	if g, err := l.Grant(ctx, grantReq("L", k0, 900_000, end, ppb)); err != nil || g.Granted != 900_000 {
		t.Fatalf("grant = %+v, %v", g, err)
	}
	// Shard 0 has 100,000 left, shard 1 has 1,000,000: cut the day by 1,000,000.
	if got, err := l.AdjustDay(ctx, "c", day, 1_000_000, end); err != nil || got != 1_000_000 {
		t.Fatalf("cut = %d, %v", got, err)
	}
	tot := mustBalance(t, l, "c", day)
	if tot.Owed != 0 || tot.Remaining() != 100_000 || tot.Target() != 1_000_000 {
		t.Fatalf("after the cut: %+v; want nothing owed and 100,000 left to grant", tot)
	}
	// Cut to 500,000, below the 900,000 leased: what is left goes, the rest is
	// owed by the shard holding the lease, and paid as it comes back.
	if got, err := l.AdjustDay(ctx, "c", day, 500_000, end); err != nil || got != 500_000 {
		t.Fatalf("cut = %d, %v", got, err)
	}
	tot = mustBalance(t, l, "c", day)
	if tot.Remaining() != 0 || tot.Owed != 400_000 {
		t.Fatalf("after the deep cut: %+v; want nothing to grant and 400,000 owed", tot)
	}
	if _, err := l.Release(ctx, k0, "L", 700_000, end); err != nil {
		t.Fatal(err)
	}
	tot = mustBalance(t, l, "c", day)
	if tot.Owed != 0 || tot.Spent != 200_000 || tot.Remaining() != 300_000 || tot.Target() != 500_000 {
		t.Fatalf("after the lease came back: %+v", tot)
	}
}

func TestSplitChangeSumsExactly(t *testing.T) {
	shards := []lease.Shard{
		{Locked: 7, Available: 3, Leased: 5, Owed: 4},
		{Locked: 0, Available: 0, Leased: 9},
		{Locked: 1_000_000_000_000_000, Available: 0},
	}
	for _, delta := range []int64{0, 1, -1, 13, -13, 999, -999, -1_000_000_000_000_010, -1_000_000_000_000_030} {
		parts := lease.SplitChange(delta, shards)
		var sum int64
		for _, p := range parts {
			sum += p
		}
		if sum != delta {
			t.Errorf("SplitChange(%d) = %v sums to %d", delta, parts, sum)
		}
	}
	if p := lease.SplitChange(-10, shards); p[1] != 0 {
		t.Errorf("a cut took %d from a shard with nothing left: %v", -p[1], p)
	}
	if p := lease.SplitChange(6, shards); p[0] < 4 {
		t.Errorf("a raise did not cancel the shard's debt first: %v", p)
	}
}

// A cut begun on a day before it closes lands before its carry-over takes
// what is left; once closed, the day's budget is final.
func TestCarryOverWaitsForABegunCut(t *testing.T) {
	l, _ := newLedger(t)
	const day, next = "2026-11-21", "2026-11-22"
	c := campaign("c", 1_000_000, 2)
	c.CarryOver = true
	mustOpen(t, l, c, day)
	if _, err := l.OpenDay(ctx, c, next, t0.Add(24*time.Hour), t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	end := t0.Add(24 * time.Hour)
	if err := l.BeginDayOpForTest(ctx, "c", day, "cut", -400_000); err != nil {
		t.Fatal(err)
	}
	if _, err := l.CarryOver(ctx, "c", day, next, end); !errors.Is(err, lease.ErrCarryNotReady) {
		t.Fatalf("carry with a cut begun: %v; want ErrCarryNotReady", err)
	}
	if _, err := l.FinishDayOps(ctx, "c", end); err != nil {
		t.Fatal(err)
	}
	carried, err := l.CarryOver(ctx, "c", day, next, end)
	if err != nil || carried != 600_000 {
		t.Fatalf("carry = %d, %v; want the 600,000 left after the cut", carried, err)
	}
	if tot := mustBalance(t, l, "c", next); tot.Budget != 1_600_000 {
		t.Fatalf("next day %+v", tot)
	}
	if _, err := l.AdjustDay(ctx, "c", day, 0, end); !errors.Is(err, lease.ErrDayClosed) {
		t.Fatalf("adjusting a closed day: %v; want ErrDayClosed", err)
	}
}

// An operator's command that failed half-way and is run again (under a new
// op id, as pacerctl does) moves the day to the budget asked for, once.
func TestRetriedCommandAfterAHalfDoneChange(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 1_000_000, 4), day)
	if err := l.BeginDayOpForTest(ctx, "c", day, "first-try", 2_000_000); err != nil {
		t.Fatal(err)
	}
	if got, err := l.AdjustDayOp(ctx, "c", day, "second-try", 3_000_000, t0); err != nil || got != 3_000_000 {
		t.Fatalf("retried command = %d, %v", got, err)
	}
	if tot := mustBalance(t, l, "c", day); tot.Budget != 3_000_000 {
		t.Fatalf("after the retried command: %+v; want 3,000,000", tot)
	}
}
