package bucket

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)

// at returns t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// step is one row of a bucket step table: at instant at(sec), apply op and
// compare with want, whose type depends on op.
type step struct {
	sec  float64
	op   string // add, spend, refund, expire, revoke, close, stats, capacity
	g    Grant  // add
	id   string // close
	n    int64  // spend, refund, capacity
	want any    // add: error (matched with errors.Is); spend: bool; refund: int64;
	// expire, revoke: []Closed; close: Closed (zero = not found); stats: Stats
}

func runSteps(t *testing.T, b *Bucket, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := at(s.sec)
		var got any
		switch s.op {
		case "add":
			err := b.AddGrant(now, s.g)
			want, _ := s.want.(error)
			if !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Errorf("step %d: t0+%vs AddGrant(%+v) = %v; want %v", i, s.sec, s.g, err, want)
			}
			checkStats(t, fmt.Sprintf("step %d", i), b.Stats(now))
			continue
		case "spend":
			got = b.Spend(now, s.n)
		case "refund":
			got = b.Refund(now, s.n)
		case "expire":
			got = b.Expire(now)
		case "revoke":
			got = b.Revoke(now)
		case "close":
			got, _ = b.CloseFeed(now, s.id)
		case "stats":
			got = b.Stats(now)
		case "capacity":
			b.SetCapacity(s.n)
			continue
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Errorf("step %d: t0+%vs %s(%v%s) = %+v; want %+v", i, s.sec, s.op, s.n, s.id, got, s.want)
		}
		checkStats(t, fmt.Sprintf("step %d", i), b.Stats(now))
	}
}

// checkStats checks the invariants every snapshot must satisfy.
func checkStats(t testing.TB, where string, s Stats) {
	t.Helper()
	if s.Granted != s.Spent-s.Refunded+s.Tokens+s.Reserve+s.Returned {
		t.Fatalf("%s: conservation broken: granted %d != spent %d - refunded %d + tokens %d + reserve %d + returned %d",
			where, s.Granted, s.Spent, s.Refunded, s.Tokens, s.Reserve, s.Returned)
	}
	if s.Spent-s.Refunded > s.Granted-s.Returned {
		t.Fatalf("%s: overspend: spent %d - refunded %d > granted %d - returned %d",
			where, s.Spent, s.Refunded, s.Granted, s.Returned)
	}
	if s.Tokens < 0 || s.Reserve < 0 || s.Refunded > s.Spent || s.OpenFeeds < 0 || s.OpenFeeds > MaxFeeds {
		t.Fatalf("%s: out of range: %+v", where, s)
	}
}

func TestBucketSteps(t *testing.T) {
	g1 := Grant{ID: "g1", Amount: 10_000, Start: at(0), End: at(10)}    // 1000 micros/s
	g2 := Grant{ID: "g2", Amount: 4_000, Start: at(9.5), End: at(13.5)} // 1000 micros/s
	g3 := Grant{ID: "g3", Amount: 3_000, Start: at(12), End: at(15)}    // 1000 micros/s
	b := New(5_000)
	runSteps(t, b, []step{
		{sec: 0, op: "add", g: g1, want: nil},
		{sec: 0, op: "spend", n: 1, want: false}, // drip, not a lump
		{sec: 1, op: "spend", n: 1000, want: true},
		{sec: 1, op: "spend", n: 1, want: false},
		{sec: 1.5, op: "spend", n: 500, want: true},
		{sec: 1.5, op: "spend", n: 0, want: false},
		{sec: 1.5, op: "refund", n: 600, want: int64(600)},
		{sec: 1.5, op: "refund", n: 0, want: int64(0)},
		// g1 is entitled to 9000 by now, but drip stops at the 5000 capacity;
		// the rest stays in the feed.
		{sec: 9, op: "spend", n: 5001, want: false},
		{sec: 9, op: "stats", want: Stats{Tokens: 5000, Reserve: 4100, Capacity: 5000, Granted: 10_000,
			Spent: 1500, Refunded: 600, OpenFeeds: 1, DripPerSecond: 1000,
			Requested: 1 + 1000 + 1 + 500 + 5001, Allows: 2, Denials: 3}},
		{sec: 9, op: "spend", n: 5000, want: true},
		// With room again, what drip forwent at capacity (3100 at t0+9s)
		// does not come back: no burst after idling at capacity.
		{sec: 9, op: "stats", want: Stats{Tokens: 0, Reserve: 4100, Capacity: 5000, Granted: 10_000,
			Spent: 6500, Refunded: 600, OpenFeeds: 1, DripPerSecond: 1000,
			Requested: 6503 + 5000, Allows: 3, Denials: 3}},
		// The clock steps back: it stands still at t0+9s, nothing new drips.
		{sec: 5, op: "spend", n: 3100, want: false},
		{sec: 5, op: "spend", n: 1, want: false},
		{sec: 9.5, op: "add", g: g2, want: nil},
		{sec: 9.5, op: "add", g: g2, want: ErrDuplicateGrant},
		{sec: 9.5, op: "add", g: Grant{ID: "g9", Amount: 0, Start: at(9.5), End: at(20)}, want: ErrInvalidGrant},
		{sec: 9.5, op: "add", g: Grant{ID: "g9", Amount: 1, Start: at(20), End: at(20)}, want: ErrInvalidGrant},
		{sec: 9.5, op: "add", g: Grant{Amount: 1, Start: at(9.5), End: at(20)}, want: ErrInvalidGrant},
		{sec: 9.5, op: "add", g: Grant{ID: "g9", Amount: 1, Start: at(0), End: at(9)}, want: ErrGrantExpired},
		{sec: 9.5, op: "add", g: Grant{ID: "g9", Amount: 1, Start: at(0), End: at(9.5)}, want: ErrGrantExpired},
		{sec: 9.5, op: "stats", want: Stats{Tokens: 500, Reserve: 3600 + 4000, Capacity: 5000, Granted: 14_000,
			Spent: 6500, Refunded: 600, OpenFeeds: 2, DripPerSecond: 2000,
			Requested: 11503 + 3100 + 1, Allows: 3, Denials: 5}},
		// g1 ends at t0+10s, before anyone looks: Spend closes it on its way,
		// withdrawing its 500 tokens (Unused = 3600 undripped + 500 withdrawn;
		// of the 3600, 3100 forgone at capacity and 500 not yet due at 9.5s).
		{sec: 12, op: "spend", n: 1, want: true},
		// Only g2's spend can be refunded; g1's was settled when it closed.
		{sec: 12, op: "refund", n: 1000, want: int64(1)},
		{sec: 12, op: "expire", want: []Closed{{ID: "g1", Amount: 10_000, Unused: 4100, Forgone: 3100}}},
		{sec: 12, op: "expire", want: []Closed(nil)},
		{sec: 12, op: "add", g: g3, want: nil},
		{sec: 13, op: "close", id: "g2", want: Closed{ID: "g2", Amount: 4000, Unused: 4000}},
		{sec: 13, op: "close", id: "g2", want: Closed{}},
		{sec: 13, op: "spend", n: 1000, want: true},
		{sec: 14, op: "revoke", want: []Closed{{ID: "g3", Amount: 3000, Unused: 2000}}},
		{sec: 14, op: "stats", want: Stats{Capacity: 5000, Granted: 17_000, Spent: 7501, Refunded: 601, Returned: 10_100,
			Requested: 14604 + 1 + 1000, Allows: 5, Denials: 5}},
		{sec: 14, op: "spend", n: 1, want: false},
		{sec: 14, op: "revoke", want: []Closed(nil)},
	})
}

// TestBucketClosedByClock checks that feeds closed by the clock alone are
// kept for Expire, Revoke or CloseFeed, and handed out exactly once.
func TestBucketClosedByClock(t *testing.T) {
	b := New(1_000_000)
	add := func(sec float64, id string, amount int64, start, end float64) step {
		return step{sec: sec, op: "add", g: Grant{ID: id, Amount: amount, Start: at(start), End: at(end)}}
	}
	runSteps(t, b, []step{
		add(0, "a", 100, 0, 1),
		add(0, "b", 200, 0, 2),
		add(0, "c", 300, 0, 3),
		{sec: 0.5, op: "spend", n: 50, want: true}, // a 50, b 50, c 50 dripped
		// a and b close at t0+2.5s before c drips. The 50 spent is charged
		// to a, which ends first: of the 100 tokens left, b's and c's drip
		// back all, so a withdraws none (Unused 50, undripped); c's 50
		// back half, so b withdraws the other 50 (Unused 150 + 50). Then c
		// drips to 250.
		{sec: 2.5, op: "stats", want: Stats{Tokens: 250, Reserve: 50,
			Capacity: 1_000_000, Granted: 600, Spent: 50, Returned: 250, OpenFeeds: 1, DripPerSecond: 100,
			Requested: 50, Allows: 1}},
		{sec: 2.5, op: "add", g: Grant{ID: "a", Amount: 1, Start: at(2.5), End: at(9)}, want: ErrDuplicateGrant},
		{sec: 2.5, op: "close", id: "b", want: Closed{ID: "b", Amount: 200, Unused: 200}},
		{sec: 2.5, op: "close", id: "b", want: Closed{}},
		{sec: 2.6, op: "revoke", want: []Closed{{ID: "a", Amount: 100, Unused: 50}, {ID: "c", Amount: 300, Unused: 300}}},
		{sec: 2.6, op: "stats", want: Stats{Capacity: 1_000_000, Granted: 600, Spent: 50, Returned: 550,
			Requested: 50, Allows: 1}},
	})
}

// TestClosingFeedKeepsItsSuccessorsTokens checks that a feed closing
// takes with it only the tokens no other open feed's drip backs: a lease
// ending while its successor drips leaves the successor's tokens
// spendable. (Taking all it dripped, the bucket was empty at each lease's
// end and a SPEND there was refused with the successor's tokens in hand.)
func TestClosingFeedKeepsItsSuccessorsTokens(t *testing.T) {
	b := New(1_000_000)
	runSteps(t, b, []step{
		{sec: 0, op: "add", g: Grant{ID: "a", Amount: 600, Start: at(0), End: at(6)}},
		{sec: 0, op: "add", g: Grant{ID: "b", Amount: 600, Start: at(3), End: at(9)}},
		// a dripped 500, b 200: 700 tokens, 200 after the spend.
		{sec: 5, op: "spend", n: 500, want: true},
		// a closes at t0+6s: the 200 tokens are b's drip, so a withdraws
		// none (Unused: its 100 undripped); b then drips to 300.
		{sec: 6, op: "expire", want: []Closed{{ID: "a", Amount: 600, Unused: 100}}},
		{sec: 6, op: "stats", want: Stats{Tokens: 300, Reserve: 300, Capacity: 1_000_000, Granted: 1200,
			Spent: 500, Returned: 100, OpenFeeds: 1, DripPerSecond: 100, Requested: 500, Allows: 1}},
		{sec: 6, op: "spend", n: 250, want: true},
		// b's end takes the rest: tokens never outlive the leases.
		{sec: 9, op: "expire", want: []Closed{{ID: "b", Amount: 600, Unused: 350}}},
		{sec: 9, op: "stats", want: Stats{Capacity: 1_000_000, Granted: 1200, Spent: 750, Returned: 450,
			Requested: 750, Allows: 2}},
		{sec: 9, op: "spend", n: 1, want: false},
	})
}

func TestBucketTooManyFeeds(t *testing.T) {
	b := New(1000)
	for i := range MaxFeeds {
		// Added latest-ending first, to exercise the ordered insert.
		g := Grant{ID: fmt.Sprint(i), Amount: 10, Start: at(0), End: at(float64(20 - i))}
		if err := b.AddGrant(at(0), g); err != nil {
			t.Fatal(err)
		}
	}
	err := b.AddGrant(at(0), Grant{ID: "x", Amount: 10, Start: at(0), End: at(30)})
	if !errors.Is(err, ErrTooManyFeeds) {
		t.Fatalf("AddGrant 9th feed = %v; want ErrTooManyFeeds", err)
	}
	// The earliest-ending feed closes, before it dripped anything (no call
	// since t0); there is room again.
	got := b.Expire(at(13))
	want := []Closed{{ID: "7", Amount: 10, Unused: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Expire = %+v; want %+v", got, want)
	}
	if err := b.AddGrant(at(13), Grant{ID: "x", Amount: 10, Start: at(13), End: at(30)}); err != nil {
		t.Fatal(err)
	}
	// The other feeds dripped 13/(20-i) of their 10 each; Revoke withdraws
	// it all.
	var unused int64
	for _, c := range b.Revoke(at(13)) {
		if c.Unused < 0 || c.Unused > c.Amount {
			t.Errorf("%+v: Unused out of [0, Amount]", c)
		}
		unused += c.Unused
	}
	s := b.Stats(at(13))
	checkStats(t, "after revoke", s)
	if s.Tokens != 0 || s.Returned != unused+10 || s.Granted != 90 {
		t.Errorf("after revoke: %+v, returned by Revoke %d", s, unused)
	}
}

func TestBucketCapacity(t *testing.T) {
	b := New(-5) // taken as 0: nothing can drip
	g := Grant{ID: "g", Amount: 1000, Start: at(0), End: at(10)}
	runSteps(t, b, []step{
		{sec: 0, op: "add", g: g},
		// At capacity 0 the feed's first 500 are forgone, not banked.
		{sec: 5, op: "spend", n: 1, want: false},
		{sec: 5, op: "capacity", n: 200},
		{sec: 5, op: "spend", n: 1, want: false}, // raising capacity brings nothing back
		{sec: 6, op: "spend", n: 101, want: false},
		{sec: 6, op: "spend", n: 100, want: true}, // one second of drip
		{sec: 6, op: "stats", want: Stats{Capacity: 200, Granted: 1000, Spent: 100, Reserve: 900,
			OpenFeeds: 1, DripPerSecond: 100, Requested: 1 + 1 + 101 + 100, Allows: 1, Denials: 3}},
		// Idle for 3 s at a 200 capacity: only 200 of the 300 drip; a burst
		// after idling is bounded by the capacity.
		{sec: 9, op: "spend", n: 201, want: false},
		{sec: 9, op: "spend", n: 200, want: true},
		// Lowering capacity keeps tokens above it spendable; drip waits.
		{sec: 9, op: "capacity", n: 50},
		{sec: 9.5, op: "spend", n: 50, want: true},
		{sec: 9.5, op: "stats", want: Stats{Capacity: 50, Granted: 1000, Spent: 350, Reserve: 650,
			OpenFeeds: 1, DripPerSecond: 100, Requested: 203 + 201 + 200 + 50, Allows: 3, Denials: 4}},
		// Dripped 350 and all spent; the 650 forgone (500 at capacity 0, 100
		// idle at 200) or not yet due (50) go back.
		{sec: 20, op: "expire", want: []Closed{{ID: "g", Amount: 1000, Unused: 650, Forgone: 600}}},
	})
}

func TestBucketGrantOverflow(t *testing.T) {
	const huge = math.MaxInt64 / 2
	b := New(huge)
	for i, want := range []error{nil, nil, ErrInvalidGrant} {
		g := Grant{ID: fmt.Sprint(i), Amount: huge, Start: at(0), End: at(1e-9)}
		if err := b.AddGrant(at(0), g); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Fatalf("grant %d: %v; want %v", i, err, want)
		}
	}
	// A nanosecond-long grant of 2^62-1 micros has a rate too big for int64.
	if s := b.Stats(at(0)); s.DripPerSecond != math.MaxInt64 {
		t.Errorf("DripPerSecond = %d; want saturated", s.DripPerSecond)
	}
	if got := b.Revoke(at(2)); len(got) != 2 || got[0].Unused != huge || got[1].Unused != huge {
		t.Errorf("Revoke = %+v", got)
	}
	if err := b.AddGrant(at(2), Grant{ID: "old", Amount: 1, Start: time.Time{}, End: at(3)}); !errors.Is(err, ErrInvalidGrant) {
		t.Errorf("grant from year 1: %v; want ErrInvalidGrant", err)
	}
}

// TestFeedEntitled checks the division-free entitlement against 128-bit
// division, at the extremes of amount and window.
func TestFeedEntitled(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	check := func(amount, window, elapsed int64) {
		t.Helper()
		f := newFeed("f", amount, 1000, 1000+window, 1000+window)
		hi, lo := bits.Mul64(uint64(amount), uint64(elapsed))
		want, _ := bits.Div64(hi, lo, uint64(window))
		if got := f.entitled(uint64(elapsed)); got != int64(want) {
			t.Fatalf("entitled(amount %d, window %d, elapsed %d) = %d; want %d", amount, window, elapsed, got, want)
		}
	}
	edges := []int64{1, 2, 3, 999, 1e9, 1e9 + 7, 1 << 31, 1<<62 - 1, 1 << 62, math.MaxInt64/2 + 1, math.MaxInt64 - 1, math.MaxInt64 - 1000}
	for _, a := range edges {
		for _, w := range edges {
			for _, e := range []int64{0, 1, w / 3, w / 2, w - 2, w - 1} {
				if e >= 0 && e < w {
					check(a, w, e)
				}
			}
		}
	}
	for range 200_000 {
		a := 1 + r.Int64N(1<<(1+r.IntN(62)))
		w := 1 + r.Int64N(1<<(1+r.IntN(62)))
		check(a, w, r.Int64N(w))
	}
}

// Issue 9, item 9: a lease no larger than one SPEND, or a campaign-day's
// last, must become spendable. With DripEnd at End (the default) the drip
// reaches the full amount only as the feed closes, so a grant of 1,000 never
// allows a SPEND of 1,000; with DripEnd earlier it does, and never past End.
func TestDripEndMakesTheWholeGrantSpendable(t *testing.T) {
	// The default: 1,000 over [0s, 30s) is never all there.
	b := New(10_000)
	if err := b.AddGrant(at(0), Grant{ID: "g", Amount: 1_000, Start: at(0), End: at(30)}); err != nil {
		t.Fatal(err)
	}
	for s := 0.0; s < 30; s += 0.5 {
		if b.Spend(at(s), 1_000) {
			t.Fatalf("SPEND 1,000 allowed at %vs from a 1,000 grant dripping until its end", s)
		}
	}
	// In full at once: DripEnd at the instant it is added.
	b = New(10_000)
	if err := b.AddGrant(at(1), Grant{ID: "g", Amount: 1_000, Start: at(0), End: at(30), DripEnd: at(1)}); err != nil {
		t.Fatal(err)
	}
	if !b.Spend(at(1), 1_000) {
		t.Fatalf("SPEND 1,000 paced with the whole 1,000 grant credited: %+v", b.Stats(at(1)))
	}
	if b.Spend(at(1), 1) {
		t.Fatal("spent more than the grant")
	}
	// Dripping until 20s of a lease spendable until 30s: 3,000 by 20s.
	b = New(10_000)
	if err := b.AddGrant(at(0), Grant{ID: "g", Amount: 3_000, Start: at(0), End: at(30), DripEnd: at(20)}); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(at(10)); st.Tokens != 1_500 || st.DripPerSecond != 150 {
		t.Fatalf("at 10s: %+v; want 1,500 tokens dripping at 150/s", st)
	}
	if st := b.Stats(at(20)); st.Tokens != 3_000 || st.Reserve != 0 || st.DripPerSecond != 0 {
		t.Fatalf("at 20s: %+v; want all 3,000 in tokens", st)
	}
	if !b.Spend(at(25), 2_000) {
		t.Fatal("SPEND 2,000 paced at 25s with 3,000 dripped")
	}
	// Never past End: the rest goes back, unused.
	if b.Spend(at(30), 1_000) {
		t.Fatal("spent from a lease at its end")
	}
	if cl := b.Expire(at(30)); len(cl) != 1 || cl[0].Unused != 1_000 {
		t.Fatalf("Expire = %+v; want the 1,000 not spent back", cl)
	}
	// A drip end outside (Start, End] is refused.
	for _, de := range []time.Time{at(0), at(31)} {
		if err := New(1).AddGrant(at(0), Grant{ID: "x", Amount: 1, Start: at(0), End: at(30), DripEnd: de}); !errors.Is(err, ErrInvalidGrant) {
			t.Errorf("drip end %v: %v; want ErrInvalidGrant", de, err)
		}
	}
}

// ForgetDenial takes back one denied Spend's counts (a SPEND decided again
// after its caller fetched a lease), and nothing else.
func TestBucketForgetDenial(t *testing.T) {
	b := New(1_000_000)
	if b.Spend(t0, 300) {
		t.Fatal("an empty bucket allowed a spend")
	}
	b.ForgetDenial(300)
	if err := b.AddGrant(t0, Grant{ID: "a", Amount: 300, Start: t0.Add(-time.Second), End: at(30), DripEnd: t0}); err != nil {
		t.Fatal(err)
	}
	if !b.Spend(t0, 300) {
		t.Fatal("the spend was denied again with the grant in")
	}
	b.ForgetDenial(300) // nothing denied to forget: no change
	if s := b.Stats(t0); s.Requested != 300 || s.Allows != 1 || s.Denials != 0 || s.Spent != 300 || s.Tokens != 0 {
		t.Fatalf("stats %+v; want the one SPEND counted once, allowed", s)
	}
}
