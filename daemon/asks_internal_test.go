package daemon

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/faultproxy"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"
)

// A grant call that the ledger applies but whose every answer is lost
// leases micros no bucket ever drips: nothing of them can be spent, and the
// daemon gives the lease back whole, whether it lives on (the next tick
// looks the lease up by its id) or dies before it learns the answer (a
// SIGKILL during the call: its successor finds the ask in the journal).
// Without it the lease expires and is settled as spent: lost to the day.
// Real redis-server behind a fault proxy; the clock is moved.
func TestLostGrantAnswerGivesTheLeaseBack(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "daemon lives on", true: "daemon killed during the call"}[crash], func(t *testing.T) {
			lostGrantAnswer(t, crash)
		})
	}
}

func lostGrantAnswer(t *testing.T, crash bool) {
	ctx := context.Background()
	srv, proxy, ledger, direct := proxiedLedger(t)
	clock := clocktest.At(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	start := journaledDaemon(t, ledger, clock, filepath.Join(t.TempDir(), "leases.journal"))
	d, j, _ := start()
	for range 5 {
		clock.Add(time.Second)
		d.Step(ctx)
		spendAll(t, d, 10)
	}
	lost := loseGrantAnswer(t, d, proxy, clock.Now())
	asks := j.Asks()
	if len(lost) != 1 || len(asks) != 1 || asks[0].ID != lost[0].id {
		t.Fatalf("after the lost answer: %d asks unresolved in the daemon, journal asks %+v; want the one call's", len(lost), asks)
	}
	key := lost[0].key
	rec, granted, err := direct.LeaseOf(ctx, key, lost[0].id)
	if err != nil || !granted || rec.Amount <= 0 {
		t.Fatalf("the ledger holds lease %s: %v %+v (err %v); want it granted by the call whose answer was lost", lost[0].id, granted, rec, err)
	}
	if crash {
		j.Close() // SIGKILL: no release, no tick; the journal keeps the ask
		d2, j2, left := start()
		t.Cleanup(func() { d2.Close(ctx) })
		back, err := d2.Reclaim(ctx, j2, left)
		if err != nil || back < rec.Amount {
			t.Fatalf("the restart gave back %d micros (err %v); want at least the %d of the lease it never fed", back, err, rec.Amount)
		}
		j = j2
	} else {
		t.Cleanup(func() { d.Close(ctx) })
		clock.Add(time.Second)
		d.Step(ctx)
	}
	if _, held, err := direct.LeaseOf(ctx, key, rec.ID); err != nil || held {
		t.Fatalf("lease %s still held by the ledger (err %v); want it released", rec.ID, err)
	}
	if got, ok := releasedUnused(t, srv.Client(), key, rec.ID); !ok || got != rec.Amount {
		t.Fatalf("lease %s released with %d unused (entry found: %v); want all %d of it", rec.ID, got, ok, rec.Amount)
	}
	if a := j.Asks(); len(a) != 0 {
		t.Fatalf("journal asks left unresolved: %+v", a)
	}
}

// journaledDaemon returns a function that starts a daemon "h" on ledger and
// clock, on the journal at path (a restart on the file a run left): the
// daemon, its journal, and the leases the journal left open.
func journaledDaemon(t *testing.T, ledger *lease.Ledger, clock *clocktest.Manual, path string) func() (*Daemon, *Journal, []JournalLease) {
	return func() (*Daemon, *Journal, []JournalLease) {
		t.Helper()
		j, left, err := OpenJournal(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(ledger, Config{Holder: "h", Clock: clock, LedgerTimeout: 5 * time.Second, LeaseTiming: LeaseTiming{SparseWait: time.Second},
			Journal: j, Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return d, j, left
	}
}

// loseGrantAnswer makes one grant of campaign c on shard 0 whose answer is
// lost, as are the ledger's own retries' (each finds the lease granted,
// and is cut off too), and returns the asks the daemon then holds
// unresolved.
func loseGrantAnswer(t *testing.T, d *Daemon, proxy *faultproxy.Proxy, now time.Time) []ask {
	t.Helper()
	c, ok := d.campaigns.get("c")
	if !ok {
		t.Fatal("campaign c not loaded")
	}
	c.loopMu.Lock()
	defer c.loopMu.Unlock()
	for range 10 {
		proxy.ResetAfter(faultproxy.Scripts)
	}
	c.grant(context.Background(), now, c.settings.Load(), c.day.Load(), 0, 1_000_000, 0, false, nil)
	proxy.Disarm()
	return append([]ask(nil), c.unanswered...)
}

// releasedUnused returns the unused micros of lease id's release entry in
// the shard's audit stream, and whether there is one.
func releasedUnused(t *testing.T, rdb *redis.Client, k lease.ShardKey, id string) (int64, bool) {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), k.AuditKey(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Values["ev"] != "release" || m.Values["lease"] != id {
			continue
		}
		n, err := strconv.ParseInt(m.Values["unused"].(string), 10, 64)
		if err != nil {
			t.Fatalf("entry %s: unused %v", m.ID, m.Values["unused"])
		}
		return n, true
	}
	return 0, false
}

// The journal keeps an ask until its answer: a G line (the lease fed) or a
// C line (answered with nothing, or released) answers it; an open ask
// survives a reopen and the compaction that follows, and a malformed A
// line is skipped, not fatal.
func TestJournalKeepsAsksUntilAnswered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.journal")
	j, _, err := OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: 2}
	exp := time.UnixMilli(1_795_000_000_000)
	for _, id := range []string{"h-b-1", "h-b-2", "h-b-3"} {
		if err := j.Asked(JournalAsk{ID: id, Key: key, Expiry: exp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Granted(JournalLease{ID: "h-b-1", Key: key, Amount: 10, DripStart: exp.Add(-time.Second), DripEnd: exp, Expiry: exp}); err != nil {
		t.Fatal(err)
	}
	j.Closed("h-b-2")
	j.Close()
	if err := os.WriteFile(path, append(must(os.ReadFile(path)), "A h-b-9 c 2026-11-21 x 5\n"...), 0o640); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second open reads the first's compaction
		j, left, err := OpenJournal(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []JournalAsk{{ID: "h-b-3", Key: key, Expiry: exp}}
		if got := j.Asks(); !reflect.DeepEqual(got, want) {
			t.Fatalf("asks after reopening: %+v; want %+v", got, want)
		}
		if len(left) != 1 || left[0].ID != "h-b-1" {
			t.Fatalf("open leases after reopening: %+v; want h-b-1", left)
		}
		j.Close()
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A lease granted by a call whose answer was lost, and given back whole, is
// counted in its run's journaled totals as the shard counts it, granted and
// returned; so when a restore later takes away grants that run's clients
// spent from, its successor's re-assertion of those totals charges what
// they spent, exactly (model seed 1489). Without the count, the shard's
// totals, holding the lost answer's lease, were ahead of the journal's in
// both fields, and reassert_run took the run for current. Real
// redis-server; the clock is moved.
func TestRestartChargesWhatARestoreForgotAfterALostAnswer(t *testing.T) {
	ctx := context.Background()
	srv, proxy, ledger, direct := proxiedLedger(t)
	clock := clocktest.At(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	start := journaledDaemon(t, ledger, clock, filepath.Join(t.TempDir(), "leases.journal"))
	var allowed int64
	run := func(d *Daemon, seconds int) {
		for range seconds {
			clock.Add(time.Second)
			d.Step(ctx)
			for range 10 {
				dec, err := d.Spend("c", 1000, "")
				if err != nil {
					t.Fatal(err)
				}
				if dec == 1 {
					allowed += 1000
				}
			}
		}
	}
	d, j, _ := start()
	run(d, 5)
	lost := loseGrantAnswer(t, d, proxy, clock.Now())
	if len(lost) != 1 {
		t.Fatalf("%d asks unresolved after the lost answer; want 1", len(lost))
	}
	key := lost[0].key
	run(d, 1) // the lost answer's lease is given back whole
	if got, ok := releasedUnused(t, srv.Client(), key, lost[0].id); !ok || got < 500_000 {
		t.Fatalf("lease %s released with %d unused (found %v); want it given back whole", lost[0].id, got, ok)
	}
	snap := srv.Snapshot(key.RedisKeys()...)
	before := allowed
	c, _ := d.campaigns.get("c")
	c.loopMu.Lock() // a grant fed into the bucket, that the restore takes away
	c.grant(ctx, clock.Now(), c.settings.Load(), c.day.Load(), 0, 300_000, 0, false, nil)
	c.loopMu.Unlock()
	run(d, 3) // SPENDs from the leases: the restore takes their charge away
	if allowed == before {
		t.Fatal("nothing allowed after the copy: the scenario tests nothing")
	}
	j.Close() // SIGKILL
	srv.Restore(snap, key.RedisKeys()...)
	clock.Add(500 * time.Millisecond)
	d2, j2, left := start()
	t.Cleanup(func() { d2.Close(ctx) })
	if _, err := d2.Reclaim(ctx, j2, left); err != nil {
		t.Fatal(err)
	}
	sh, err := direct.ReadShard(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clients allowed %d (%d after the copy); the shard counts %d spent, %d leased", allowed, allowed-before, sh.Spent, sh.Leased)
	if sh.Spent+sh.Leased < allowed {
		t.Fatalf("clients were allowed %d, the shard counts %d spent + %d leased: %d allowed without a charge", allowed, sh.Spent, sh.Leased, allowed-sh.Spent-sh.Leased)
	}
	if sh.Spent != allowed || sh.Leased != 0 {
		t.Fatalf("the shard counts %d spent + %d leased; want exactly the %d the clients were allowed, nothing held", sh.Spent, sh.Leased, allowed)
	}
}
