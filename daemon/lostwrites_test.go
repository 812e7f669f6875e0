package daemon_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

func info(d *daemon.Daemon, key string) int64 {
	for _, f := range d.Info() {
		if f.Key == key {
			n, _ := strconv.ParseInt(f.Value, 10, 64)
			return n
		}
	}
	return -1
}

// A shard rolled back to an older copy while two daemons hold leases on it:
// they find out from their next ledger call, freeze the shard and re-assert
// what they hold, so every micro the clients were allowed is accounted for
// in the ledger (leased or spent), and check names the shard.
func TestShardRolledBackWhileLeasesAreHeld(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000, 1) // 1,000 micros a second
	f.Clock.Set(midnight.Add(12 * time.Hour))
	a, b := f.daemon(t, "a"), f.daemon(t, "b")
	var allowed int64
	run := func(seconds int) {
		for range seconds {
			f.Clock.Add(time.Second)
			for _, d := range []*daemon.Daemon{a, b} {
				d.Step(ctx)
				n, _ := spendUntilDenied(t, d, "c", 100)
				allowed += n
			}
		}
	}
	run(10)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	snap := f.Redis.Snapshot(k.RedisKeys()...)
	seq := func() int64 {
		sh, err := f.Ledger.ReadShard(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return sh.Seq
	}
	before := seq()
	// Leases granted, renewed and released: then forgotten. Past the first
	// leases' window, so that they are renewed or released in it however
	// soon the daemons' first leases supplied them.
	run(30)
	if after := seq(); after == before {
		t.Fatalf("the shard took no write between the snapshot and its restore (seq %d): nothing to forget", before)
	}
	f.Redis.Restore(snap, k.RedisKeys()...)
	run(120)

	if info(a, "ledger_lost_writes")+info(b, "ledger_lost_writes") == 0 {
		t.Fatal("neither daemon noticed that the shard lost writes")
	}
	if info(a, "leases_reasserted")+info(b, "leases_reasserted") == 0 {
		t.Fatal("no lease was re-asserted")
	}
	tot, problems, err := f.Ledger.CheckDay(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	if allowed > tot.Spent+tot.Leased {
		t.Fatalf("clients were allowed %d micros; the ledger accounts for %d spent + %d leased", allowed, tot.Spent, tot.Leased)
	}
	var named bool
	for _, p := range problems {
		if p.Shard == k && strings.Contains(p.What, "lost acknowledged writes") {
			named = true
			continue
		}
		t.Errorf("conservation: %s", p)
	}
	if !named {
		t.Errorf("check does not name the shard that lost writes: %v", problems)
	}
}

// A daemon SIGKILLed with leases in hand: its next run reads its journal
// and gives back what its buckets had not dripped, before the reconciler
// would settle the leases as wholly spent.
func TestRestartReclaimsWhatACrashedRunHeld(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000, 2)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	path := filepath.Join(t.TempDir(), "leases.journal")
	j, left, err := daemon.OpenJournal(path, nil)
	if err != nil || len(left) != 0 {
		t.Fatalf("journal: %v, %v", left, err)
	}
	crashed, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	var allowed int64
	for range 20 {
		f.Clock.Add(time.Second)
		crashed.Step(ctx)
		n, _ := spendUntilDenied(t, crashed, "c", 100)
		allowed += n
	}
	held := f.Check(t, "c")
	if held.Leased == 0 {
		t.Fatal("the daemon holds no lease to lose")
	}
	j.Close() // the process dies: no Close, no release; the file is what the kernel had

	f.Clock.Add(2 * time.Second) // systemd restarts it
	j2, left, err := daemon.OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if len(left) == 0 {
		t.Fatal("the journal remembers no lease")
	}
	next := f.daemon(t, "h")
	back, err := next.Reclaim(ctx, j2, left)
	if err != nil {
		t.Fatal(err)
	}
	tot := f.Check(t, "c")
	if tot.Leased != 0 || tot.Lost != 0 {
		t.Fatalf("after the reclaim: %+v; want nothing leased and nothing settled as lost", tot)
	}
	if allowed > tot.Spent {
		t.Fatalf("clients were allowed %d micros, the ledger counts %d spent", allowed, tot.Spent)
	}
	// What is lost is only what had dripped and was not spent: far less than
	// the leases held.
	if waste := tot.Spent - allowed; back == 0 || waste > held.Leased/4 {
		t.Fatalf("gave back %d of %d held; %d counted spent that no client spent", back, held.Leased, waste)
	}
	t.Logf("held %d, gave back %d, lost to the crash %d (allowed %d)", held.Leased, back, tot.Spent-allowed, allowed)
	if again, err := next.Reclaim(ctx, j2, left); err != nil || again != 0 {
		t.Fatalf("a second reclaim gave back %d, %v", again, err)
	}
}
