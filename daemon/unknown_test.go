package daemon_test

import (
	"errors"
	"github.com/pacer/pacer"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/faultproxy"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// redisCalls returns the commands Redis has run since CONFIG RESETSTAT, by
// name, from INFO commandstats.
func redisCalls(t testing.TB, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		calls[name] = n
	}
	// INFO is counted after its reply is made; RESETSTAT after the reset.
	delete(calls, "config|resetstat")
	return calls
}

func total(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}

func resetStats(t testing.TB, rdb *redis.Client) {
	t.Helper()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// unknownFloodBound is the most Redis calls a flood of distinct unknown ids
// costs per unknown_campaign_ttl from one sequential client: 17 HGETALLs
// (the negative cache's misses before it switches to the set of ids) and
// one SMEMBERS.
const unknownFloodBound = 18

// floodUnknown asks d about n distinct ids the ledger does not know.
func floodUnknown(t testing.TB, d *daemon.Daemon, prefix string, n int) {
	t.Helper()
	var unknown *lease.UnknownCampaignError
	for i := range n {
		if _, err := d.Spend(pacer.CampaignID(prefix+strconv.Itoa(i)), 1, ""); !errors.As(err, &unknown) {
			t.Fatalf("SPEND %s%d: %v, want unknown campaign", prefix, i, err)
		}
	}
}

// TestUnknownCampaignFlood: 10,000 distinct unknown ids (100,000 in
// BenchmarkUnknownCampaignFlood, without -race) cost at most
// unknownFloodBound Redis calls per TTL, real campaigns keep working, one
// created during the flood is usable within the TTL, and one unknown id
// asked again and again costs one read per TTL.
func TestUnknownCampaignFlood(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "real", 8_640_000_000, 2)
	f.Clock.Set(midnight.Add(time.Hour))
	const ttl = 10 * time.Second
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h1", Clock: f.Clock, UnknownCampaignTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	rdb := f.Redis.Client()
	resetStats(t, rdb)

	floodUnknown(t, d, "ghost-", 10_000)
	calls := redisCalls(t, rdb)
	t.Logf("10,000 unknown ids: %d Redis calls %v", total(calls), calls)
	if total(calls) > unknownFloodBound || calls["smembers"] != 1 {
		t.Fatalf("10,000 unknown ids cost %d Redis calls %v, want at most %d", total(calls), calls, unknownFloodBound)
	}

	// A real campaign, first used during the flood, loads as usual.
	if _, err := d.Spend("real", 1, ""); err != nil {
		t.Fatalf("SPEND real during the flood: %v", err)
	}
	// One created during the flood is unknown until the TTL has passed.
	f.Campaign(t, "late", 8_640_000_000, 2)
	var unknown *lease.UnknownCampaignError
	if _, err := d.Spend("late", 1, ""); !errors.As(err, &unknown) {
		t.Fatalf("SPEND late within the TTL: %v, want unknown campaign", err)
	}
	f.Clock.Add(ttl)
	if _, err := d.Spend("late", 1, ""); err != nil {
		t.Fatalf("SPEND late after the TTL: %v", err)
	}

	// One unknown id, asked 1,000 times a TTL for 3 TTLs: one read per TTL.
	resetStats(t, rdb)
	for range 3 {
		f.Clock.Add(ttl)
		for range 1000 {
			if _, err := d.Spend("ghost-again", 1, ""); !errors.As(err, &unknown) {
				t.Fatal(err)
			}
		}
	}
	if calls := redisCalls(t, rdb); calls["hgetall"] != 3 || total(calls) != 3 {
		t.Fatalf("one unknown id 3,000 times over 3 TTLs: Redis calls %v, want 3 HGETALL", calls)
	}

	// A second flood after the TTL costs the same again, not more.
	resetStats(t, rdb)
	f.Clock.Add(ttl)
	floodUnknown(t, d, "phantom-", 10_000)
	if calls := redisCalls(t, rdb); total(calls) > unknownFloodBound {
		t.Fatalf("second flood: %d Redis calls %v", total(calls), calls)
	}
}

// Concurrent floods: loads in flight when the set of ids is read still make
// their one read each, so the bound grows with MaxCampaignLoads.
func TestUnknownCampaignFloodConcurrent(t *testing.T) {
	f := newFixture(t)
	f.Clock.Set(midnight.Add(time.Hour))
	const loads = 8
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h1", Clock: f.Clock, MaxCampaignLoads: loads})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	rdb := f.Redis.Client()
	resetStats(t, rdb)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1250 {
				id := "ghost-" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				_, err := d.Spend(pacer.CampaignID(id), 1, "")
				var unknown *lease.UnknownCampaignError
				if !errors.As(err, &unknown) && (err == nil || !strings.Contains(err.Error(), "retry")) {
					t.Errorf("SPEND %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	calls := redisCalls(t, rdb)
	t.Logf("8 x 1,250 unknown ids concurrently: %d Redis calls %v", total(calls), calls)
	// Each load in flight may make its read, and the pool may dial a
	// connection (HELLO) for each.
	if bound := unknownFloodBound + 2*loads; total(calls) > bound || calls["smembers"] != 1 {
		t.Fatalf("%d Redis calls %v, want at most %d", total(calls), calls, bound)
	}
}

// Past MaxCampaignLoads loads in flight, a first use is refused at once with
// a retry error, without a Redis call.
func TestCampaignLoadsBounded(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "a", 8_640_000_000, 2)
	f.Campaign(t, "b", 8_640_000_000, 2)
	f.Clock.Set(midnight.Add(time.Hour))
	p, err := faultproxy.Start(f.Redis.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: p.Socket, Protocol: 2})
	defer rdb.Close()
	ledger := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	d, err := daemon.New(ledger, daemon.Config{Holder: "h1", Clock: f.Clock, MaxCampaignLoads: 1, LedgerTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	// a's first SPEND gives up after firstLoadTimeout (2s); its load goes
	// on, holding the only slot, while Redis answers after 3s.
	const delay = 3 * time.Second
	p.SetDelay(delay)
	if _, err := d.Spend("a", 1, ""); err == nil || !strings.Contains(err.Error(), "not loaded yet") {
		t.Fatalf("SPEND a with Redis slow: %v, want not loaded yet", err)
	}
	forwarded := p.Forwarded()
	start := time.Now()
	_, err = d.Spend("b", 1, "")
	if err == nil || err.Error() != `campaign "b": 1 campaigns being loaded already; retry` {
		t.Fatalf("SPEND b while a loads: %v, want a retry error", err)
	}
	if took := time.Since(start); took >= delay || p.Forwarded() != forwarded {
		t.Fatalf("refusal took %v and %d Redis commands: it waited for Redis", took, p.Forwarded()-forwarded)
	}
	p.SetDelay(0)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, errA := d.Spend("a", 1, "")
		_, errB := d.Spend("b", 1, "")
		if errA == nil && errB == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the slow load: SPEND a %v, b %v", errA, errB)
		}
	}
}

// BenchmarkUnknownCampaignFlood: 100,000 distinct unknown ids per TTL
// against a real redis-server; reports the Redis calls of the worst flood and
// the daemon's time per unknown id.
func BenchmarkUnknownCampaignFlood(b *testing.B) {
	f := newFixture(b)
	f.Clock.Set(midnight.Add(time.Hour))
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h1", Clock: f.Clock})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close(ctx)
	rdb := f.Redis.Client()
	const n = 100_000
	worst, rounds := 0, 0
	for b.Loop() {
		resetStats(b, rdb)
		f.Clock.Add(time.Minute) // a new TTL every round: the worst case
		floodUnknown(b, d, "ghost-"+strconv.Itoa(rounds)+"-", n)
		calls := redisCalls(b, rdb)
		delete(calls, "hello") // a connection the pool dialled
		if total(calls) > worst {
			worst = total(calls)
			b.Logf("%d unknown ids: Redis calls %v", n, calls)
		}
		rounds++
	}
	if worst > unknownFloodBound {
		b.Fatalf("%d Redis calls for %d unknown ids", worst, n)
	}
	b.ReportMetric(float64(worst), "redis-calls/flood")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*n), "ns/unknown-id")
}

// Warm, at start, loads more campaigns than MaxCampaignLoads: its loads wait
// for a slot rather than being refused.
func TestWarmWaitsForLoadSlots(t *testing.T) {
	f := newFixture(t)
	f.Clock.Set(midnight.Add(time.Hour))
	var ids []string
	for i := range 20 {
		id := "warm-" + strconv.Itoa(i)
		f.Campaign(t, id, 8_640_000_000, 1)
		ids = append(ids, id)
	}
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h1", Clock: f.Clock, MaxCampaignLoads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	d.Warm(ids)
	if got := len(d.Campaigns()); got != len(ids) {
		t.Fatalf("%d campaigns loaded by Warm, want %d", got, len(ids))
	}
}
