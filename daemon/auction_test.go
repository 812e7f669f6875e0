package daemon_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// auctionFixture is a daemon with campaign "c" loaded and tokens in its
// bucket, ten minutes into the day; the clock does not move unless the test
// moves it, so the bucket's tokens change only by SPENDs and REFUNDs.
func auctionFixture(t *testing.T, cfg daemon.Config) (*fixture, *daemon.Daemon) {
	t.Helper()
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(10 * time.Minute))
	cfg.Holder, cfg.Clock = "h", f.Clock
	if cfg.SparseWait == 0 {
		// These tests count the bucket's tokens SPEND by SPEND, after a
		// quiet start that leaves the campaign sparse: a SPEND that fetched
		// its lease would change what they count (fetch_test.go covers that,
		// with auction ids too).
		cfg.SparseWait = daemon.Never
	}
	d, err := daemon.New(f.Ledger, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	// A first SPEND loads the campaign and sizes its bucket for SPENDs of
	// this size; ten seconds of drip fill it.
	if _, err := d.Spend("c", 10_000, ""); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	return f, d
}

func tokens(t *testing.T, d *daemon.Daemon, id string) int64 {
	t.Helper()
	b, err := d.Balance(pacer.CampaignID(id))
	if err != nil {
		t.Fatal(err)
	}
	return b.Tokens
}

func mustSpend(t *testing.T, d *daemon.Daemon, amount int64, auction string, want pacer.Decision) {
	t.Helper()
	dec, err := d.Spend("c", pacer.Micros(amount), auction)
	if err != nil || dec != want {
		t.Fatalf("SPEND c %d %s = %v, %v; want %v", amount, auction, dec, err, want)
	}
}

// Issue 9, item 5: a refunded auction id must not replay a free ":1". A
// plain retry is still answered from memory without a second charge.
func TestSpendAfterRefundChargesAgain(t *testing.T) {
	_, d := auctionFixture(t, daemon.Config{})
	const amount = 5_000
	t0 := tokens(t, d, "c")
	if t0 < 6*amount {
		t.Fatalf("bucket holds %d micros; the test needs %d", t0, 6*amount)
	}

	mustSpend(t, d, amount, "a1", pacer.Allowed)
	mustSpend(t, d, amount, "a1", pacer.Allowed) // retry: replayed
	if got := tokens(t, d, "c"); got != t0-amount {
		t.Fatalf("after SPEND a1 twice (a retry): tokens %d, want %d (charged once)", got, t0-amount)
	}
	if err := d.Refund("c", amount, "a1"); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, d, "c"); got != t0 {
		t.Fatalf("after REFUND a1: tokens %d, want %d", got, t0)
	}
	mustSpend(t, d, amount, "a1", pacer.Allowed)
	if got := tokens(t, d, "c"); got != t0-amount {
		t.Fatalf("SPEND a1 after REFUND a1: tokens %d, want %d: the :1 was not charged", got, t0-amount)
	}
	// The second charge is refundable too, and no more than it.
	if err := d.Refund("c", amount, "a1"); err != nil {
		t.Fatalf("refund of the second charge: %v", err)
	}
	if err := d.Refund("c", 1, "a1"); err == nil {
		t.Fatal("refunded more than auction a1 was charged")
	}

	// A partial refund counts too; so does a retry asking for more.
	mustSpend(t, d, amount, "a2", pacer.Allowed)
	if err := d.Refund("c", amount/2, "a2"); err != nil {
		t.Fatal(err)
	}
	before := tokens(t, d, "c")
	mustSpend(t, d, amount, "a2", pacer.Allowed)
	if got := tokens(t, d, "c"); got != before-amount {
		t.Fatalf("SPEND a2 after a partial REFUND: tokens %d, want %d", got, before-amount)
	}
	mustSpend(t, d, amount, "a3", pacer.Allowed)
	before = tokens(t, d, "c")
	mustSpend(t, d, 2*amount, "a3", pacer.Allowed)
	if got := tokens(t, d, "c"); got != before-2*amount {
		t.Fatalf("SPEND a3 for more than its first charge: tokens %d, want %d", got, before-2*amount)
	}
}

// Issue 9, item 3: an auction allowed at 23:59:52 and refunded at 00:00:02
// belongs to the day that closed: the refund is refused with an error that
// says so, and today's bucket is not credited.
func TestRefundAcrossMidnightIsRefused(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(24*time.Hour - 40*time.Second))
	// One SPEND before 23:59:52: the campaign is sparse here, so that SPEND
	// fetches its lease, waiting in real time. The default 5 ms let a loaded
	// CI machine (packages side by side, -race) have it paced; a second
	// takes the load out of it.
	d := f.sparseDaemon(t, "h", time.Second)
	if _, err := d.Spend("c", 10_000, ""); err != nil {
		t.Fatal(err)
	}
	for f.Clock.Now().Before(midnight.Add(24*time.Hour - 8*time.Second)) { // 23:59:52
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	mustSpend(t, d, 1_000, "late", pacer.Allowed)

	// Past midnight: the loop rolls the day over and leases from the new one.
	for f.Clock.Now().Before(midnight.Add(24*time.Hour + 2*time.Second)) { // 00:00:02
		f.Clock.Add(500 * time.Millisecond)
		d.Step(ctx)
	}
	const want = `auction "late" was allowed on 2026-11-21, a campaign-day that has closed; nothing credited`
	refuse := func() {
		t.Helper()
		before := tokens(t, d, "c")
		err := d.Refund("c", 1_000, "late")
		if err == nil {
			t.Fatalf("refund at %v of an auction allowed at 23:59:52 was credited to the new day", f.Clock.Now())
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refund error %q; want it to say %q", err, want)
		}
		if got := tokens(t, d, "c"); got != before {
			t.Fatalf("today's tokens went from %d to %d on a refused refund", before, got)
		}
	}
	refuse()

	// Once today has spend of its own, "no more than this daemon allowed
	// today" no longer stops the refund: the auction's day must.
	for f.Clock.Now().Before(midnight.Add(24*time.Hour + 10*time.Second)) {
		f.Clock.Add(500 * time.Millisecond)
		d.Step(ctx)
	}
	mustSpend(t, d, 1_000, "early", pacer.Allowed)
	mustSpend(t, d, 1_000, "early2", pacer.Allowed)
	refuse()
	// Without an id, a refund is credited against the current campaign-day
	// only, never beyond what this daemon allowed on it (2,000).
	if err := d.Refund("c", 2_001, ""); err == nil {
		t.Fatal("an id-less refund above what today allowed was accepted")
	}
	// Today's own auctions are refunded as before.
	before := tokens(t, d, "c")
	if err := d.Refund("c", 1_000, "early"); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, d, "c"); got != before+1_000 {
		t.Fatalf("refund of today's auction: tokens %d, want %d", got, before+1_000)
	}
	// An id-less refund this early in the day may be for yesterday's "late":
	// it is accepted and credited to no bucket (the ledger counted it spent
	// yesterday); later in the day, id-less refunds are credited again.
	before = tokens(t, d, "c")
	if err := d.Refund("c", 1_000, ""); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, d, "c"); got != before {
		t.Fatalf("an id-less refund 10 s into the day was credited to it: tokens %d -> %d", before, got)
	}
	for f.Clock.Now().Before(midnight.Add(24*time.Hour + 11*time.Minute)) {
		f.Clock.Add(5 * time.Second)
		d.Step(ctx)
	}
	for i := 0; ; i++ { // demand again, after ten idle minutes: a lease comes
		if dec, err := d.Spend("c", 1_000, ""); err != nil || dec == pacer.Allowed {
			break
		}
		if i == 30 {
			t.Fatal("no SPEND allowed eleven minutes into the day")
		}
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	before = tokens(t, d, "c")
	if err := d.Refund("c", 1_000, ""); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, d, "c"); got != before+1_000 {
		t.Fatalf("an id-less refund 11 minutes into the day: tokens %d, want %d", got, before+1_000)
	}
}

// Issue 9, item 8: only allowed answers are remembered. A paced SPEND's
// retry decides again, and is charged if allowed then.
func TestPacedAuctionIsDecidedAgain(t *testing.T) {
	f, d := auctionFixture(t, daemon.Config{})
	big := tokens(t, d, "c") + 1
	mustSpend(t, d, big, "p1", pacer.Paced)
	// Spend the bucket down to less than 5,000, so a SPEND of 5,000 is paced.
	n, _ := spendUntilDenied(t, d, "c", 1_000)
	if n == 0 {
		t.Fatal("no tokens to spend")
	}
	mustSpend(t, d, 5_000, "p2", pacer.Paced)
	for tokens(t, d, "c") < 5_000 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	before := tokens(t, d, "c")
	mustSpend(t, d, 5_000, "p2", pacer.Allowed)
	if got := tokens(t, d, "c"); got != before-5_000 {
		t.Fatalf("retry of a paced SPEND, allowed now: tokens %d, want %d (charged)", got, before-5_000)
	}
}

// gauge returns the value of an unlabelled gauge from d's collector.
func gauge(t *testing.T, d *daemon.Daemon, name string) float64 {
	t.Helper()
	v, ok := exportedGauge(t, d, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return v
}

// Issue 9, item 8: past the memory bound the oldest ids are forgotten first;
// the window actually kept is exported and quoted by the refund error.
func TestAuctionMemoryForgetsOldestFirst(t *testing.T) {
	f, d := auctionFixture(t, daemon.Config{DedupMemoryBytes: 16 << 10})
	if w := gauge(t, d, "pacer_auction_ids_window_seconds"); w != 600 {
		t.Fatalf("window kept %vs before any id was forgotten; want the configured 600s", w)
	}
	// 1,000 ids at one instant: 16 KiB keeps a few hundred.
	const ids = 1_000
	for i := range ids {
		mustSpend(t, d, 1, "id-"+strconv.Itoa(i), pacer.Allowed)
	}
	if n := gauge(t, d, "pacer_auction_ids_remembered"); n >= ids || n < 100 {
		t.Fatalf("%v ids remembered of %d within 16 KiB", n, ids)
	}
	if b := gauge(t, d, "pacer_auction_ids_memory_bytes"); b > 16<<10 {
		t.Fatalf("auction ids hold %v bytes; bound 16 KiB", b)
	}
	before := tokens(t, d, "c")
	for i := ids - 100; i < ids; i++ { // the newest are remembered: replayed
		mustSpend(t, d, 1, "id-"+strconv.Itoa(i), pacer.Allowed)
	}
	if got := tokens(t, d, "c"); got != before {
		t.Fatalf("retries of the newest ids were charged: tokens %d, want %d", got, before)
	}
	mustSpend(t, d, 1, "id-0", pacer.Allowed) // the oldest is forgotten: charged again
	if got := tokens(t, d, "c"); got != before-1 {
		t.Fatalf("retry of the oldest (forgotten) id: tokens %d, want %d", got, before-1)
	}

	f.Clock.Add(37 * time.Second)
	if w := gauge(t, d, "pacer_auction_ids_window_seconds"); w != 37 {
		t.Fatalf("window kept %vs; every id of the last 37s is remembered, no more", w)
	}
	err := d.Refund("c", 1, "id-1")
	if err == nil || !strings.Contains(err.Error(), `auction "id-1" not seen as allowed in the last 37s`) {
		t.Fatalf("refund of a forgotten id: %v", err)
	}
	if err := d.Refund("c", 1, "id-999"); err != nil {
		t.Fatalf("refund of a remembered id: %v", err)
	}
}

// Ids are remembered for DedupWindow at most: a retry after it is charged.
func TestAuctionWindowExpires(t *testing.T) {
	f, d := auctionFixture(t, daemon.Config{DedupWindow: time.Minute})
	mustSpend(t, d, 1_000, "w1", pacer.Allowed)
	for range 61 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	before := tokens(t, d, "c")
	mustSpend(t, d, 1_000, "w1", pacer.Allowed)
	if got := tokens(t, d, "c"); got != before-1_000 {
		t.Fatalf("retry after the window: tokens %d, want %d (charged)", got, before-1_000)
	}
	mustSpend(t, d, 1_000, "w1", pacer.Allowed)
	if got := tokens(t, d, "c"); got != before-1_000 {
		t.Fatalf("retry within the window: tokens %d, want %d (not charged)", got, before-1_000)
	}
	f.Clock.Add(time.Minute)
	if err := d.Refund("c", 1_000, "w1"); err == nil || !strings.Contains(err.Error(), "not seen as allowed in the last 1m0s") {
		t.Fatalf("refund after the window: %v", err)
	}
}

func TestDedupMemoryBounds(t *testing.T) {
	for _, n := range []int64{-1, 100, daemon.MinDedupMemoryBytes - 1, daemon.MaxDedupMemoryBytes + 1} {
		if _, err := (daemon.Config{DedupMemoryBytes: n}).WithDefaults(); err == nil {
			t.Errorf("DedupMemoryBytes %d accepted", n)
		}
	}
	c, err := daemon.Config{}.WithDefaults()
	if err != nil || c.DedupMemoryBytes != daemon.DefaultDedupMemoryBytes {
		t.Fatalf("default DedupMemoryBytes = %d, %v; want %d", c.DedupMemoryBytes, err, daemon.DefaultDedupMemoryBytes)
	}
}
