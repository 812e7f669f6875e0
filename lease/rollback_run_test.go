package lease_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// runDaemon is one daemon run as the ledger sees it: its lease ids share the
// run's prefix, and it passes back its acknowledged history and totals.
type runDaemon struct {
	l      *lease.Ledger
	k      lease.ShardKey
	run    string
	n      int
	known  lease.History
	at     time.Time
	leases map[string]int64
}

func (d *runDaemon) grant(t *testing.T, want int64) (string, error) {
	t.Helper()
	d.n++
	id := fmt.Sprintf("%s-%d", d.run, d.n)
	r := grantReq(id, d.k, want, d.at, ppb)
	r.Known = d.known
	g, err := d.l.Grant(ctx, r)
	if err != nil {
		return id, err
	}
	d.known.Seq, d.known.Tip = g.Shard.Seq, g.Shard.Tip
	d.known.Granted += g.Granted
	d.leases[id] = g.Granted
	return id, nil
}

func (d *runDaemon) release(t *testing.T, id string, unused int64) {
	t.Helper()
	sh, err := d.l.ReleaseKnown(ctx, d.k, id, unused, d.at, d.known)
	if err != nil {
		t.Fatalf("%s: release %s: %v", d.run, id, err)
	}
	d.known.Seq, d.known.Tip = sh.Seq, sh.Tip
	d.known.Returned += unused
	delete(d.leases, id)
}

// twoRuns is a redis-server whose ledger holds campaign c's day of
// 1,000,000 micros on one shard, and two daemon runs, A and B, on it at
// 23:00.
func twoRuns(t *testing.T) (*redistest.Server, *lease.Ledger, lease.ShardKey, *runDaemon, *runDaemon) {
	t.Helper()
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 1_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	at := t0.Add(23 * time.Hour)
	a := &runDaemon{l: l, k: k, run: "hostA-boot1", at: at, leases: map[string]int64{}}
	b := &runDaemon{l: l, k: k, run: "hostB-boot1", at: at, leases: map[string]int64{}}
	return srv, l, k, a, b
}

// A rollback that loses a lease granted and released is seen by the run
// that took it however many writes others made since (the 64-pair history
// window passed it: 1,500,000 leased on 1,000,000), and its totals
// re-asserted make the shard count what its clients spent: the day then
// grants no more than its budget.
func TestRollbackSeenByTheRunsTotalsBeyondTheHistoryWindow(t *testing.T) {
	srv, l, k, a, b := twoRuns(t)

	snap := srv.Snapshot(k.RedisKeys()...)
	// A takes half the day and its clients spend 400,000 of it; it gives
	// the rest back. Then Redis comes back from the copy taken before.
	id, err := a.grant(t, 500_000)
	if err != nil {
		t.Fatal(err)
	}
	a.release(t, id, 100_000)
	srv.Restore(snap, k.RedisKeys()...)

	// B, which never saw the lost writes, makes 70 small grants and
	// releases (more than the shard's 64-pair history).
	for range 35 {
		id, err := b.grant(t, 1)
		if err != nil {
			t.Fatalf("B: %v", err)
		}
		b.release(t, id, 1)
	}
	// A asks again with its history and totals: refused, the shard lost
	// what A saw.
	if _, err := a.grant(t, 100_000); !errors.Is(err, lease.ErrLedgerDiverged) {
		t.Fatalf("A's grant after the rollback and 70 writes: %v; want ErrLedgerDiverged", err)
	}
	// A re-asserts its totals: the 400,000 its clients spent is counted.
	added, sh, err := l.ReassertRun(ctx, k, a.run, a.known, a.at)
	if err != nil || added != 400_000 {
		t.Fatalf("ReassertRun = %d, %+v, %v; want 400,000 added to spent", added, sh, err)
	}
	if again, _, err := l.ReassertRun(ctx, k, a.run, a.known, a.at); err != nil || again != 0 {
		t.Fatalf("ReassertRun again = %d, %v; want 0 (idempotent)", again, err)
	}
	a.known.Seq, a.known.Tip = 0, 0
	// Everyone now asks for everything: the day grants 600,000 more, not
	// 1,000,000, and A's clients' 400,000 plus that is the budget.
	var granted int64
	for _, d := range []*runDaemon{a, b} {
		if _, err := d.grant(t, lease.MaxBudgetMicros); err != nil {
			t.Fatalf("%s: %v", d.run, err)
		}
		for _, amount := range d.leases {
			granted += amount
		}
	}
	if granted != 600_000 {
		t.Fatalf("granted %d after the re-assertion; want 600,000 (400,000 already spent of 1,000,000)", granted)
	}
	if tot := mustBalance(t, l, "c", k.Day); tot.Spent+tot.Leased != 1_000_000 {
		t.Fatalf("totals %+v", tot)
	}
}

// RunsBehind names, in one read, the runs whose totals a shard records less
// of than they did: exactly those ReassertRun would raise. A shard current
// for a run names none (its idle check then costs no script call), one that
// lost the run's writes to a restore names it, and so does a day not open.
func TestRunsBehindIsWhatReassertRunWouldRaise(t *testing.T) {
	srv, l, k, a, b := twoRuns(t)
	behind := func(want ...string) {
		t.Helper()
		got, err := l.RunsBehind(ctx, k, map[string]lease.History{a.run: a.known, b.run: b.known})
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("RunsBehind = %v, %v; want %v", got, err, want)
		}
	}
	if _, err := b.grant(t, 100_000); err != nil {
		t.Fatal(err)
	}
	snap := srv.Snapshot(k.RedisKeys()...)
	id, err := a.grant(t, 500_000)
	if err != nil {
		t.Fatal(err)
	}
	a.release(t, id, 100_000)
	behind()
	srv.Restore(snap, k.RedisKeys()...)
	behind(a.run)
	if added, _, err := l.ReassertRun(ctx, k, a.run, a.known, a.at); err != nil || added != 400_000 {
		t.Fatalf("ReassertRun = %d, %v; want 400,000 added", added, err)
	}
	behind()
	a.known.Returned++ // a release the shard has not seen
	behind(a.run)
	other := lease.ShardKey{Campaign: "c", Day: "2026-11-22", Shard: 0}
	if got, err := l.RunsBehind(ctx, other, map[string]lease.History{a.run: a.known}); err != nil || len(got) != 1 {
		t.Fatalf("RunsBehind on a day not open = %v, %v; want the run", got, err)
	}
}
