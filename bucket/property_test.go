package bucket

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// model is what the property test knows without reimplementing the
// bucket: the grants it made, which have been handed back as Closed, and
// the high-water clock. From these it predicts AddGrant's errors, which
// feeds are open and which Expire must return.
type model struct {
	hw       time.Time        // latest instant passed to the bucket
	grants   map[string]Grant // every grant accepted
	order    []string         // ids of grants, in order added
	out      map[string]bool  // ids handed back by Expire, Revoke or CloseFeed
	unused   int64            // sum of Unused handed back
	nextID   int
	spent    int64 // model's own sums, checked against Stats
	refunded int64
}

func (m *model) see(now time.Time) time.Time {
	if now.After(m.hw) {
		m.hw = now
	}
	return m.hw
}

// pending are ids accepted and not handed back; open are those of them
// whose End is still ahead of the clock.
func (m *model) pending() (pending, open int) {
	for _, id := range m.order {
		if !m.out[id] {
			pending++
			if m.grants[id].End.After(m.hw) {
				open++
			}
		}
	}
	return pending, open
}

func (m *model) handBack(t *testing.T, where string, cs []Closed) {
	t.Helper()
	for _, c := range cs {
		g, ok := m.grants[c.ID]
		switch {
		case !ok:
			t.Fatalf("%s: closed unknown feed %+v", where, c)
		case m.out[c.ID]:
			t.Fatalf("%s: feed %q handed back twice", where, c.ID)
		case c.Amount != g.Amount || c.Unused < 0 || c.Unused > c.Amount || c.Forgone < 0 || c.Forgone > c.Unused:
			t.Fatalf("%s: %+v: want Amount %d, Unused in [0, Amount], Forgone in [0, Unused]", where, c, g.Amount)
		}
		m.out[c.ID] = true
		m.unused += c.Unused
	}
}

// openAmount sums the grants whose feeds are open: accepted, not handed
// back, and not yet at their End.
func (m *model) openAmount() int64 {
	var sum int64
	for _, id := range m.order {
		if g := m.grants[id]; !m.out[id] && g.End.After(m.hw) {
			sum += g.Amount
		}
	}
	return sum
}

// entitledSum bounds what the bucket may ever have let out by t: the
// grants' drip entitlement. Closed feeds stopped dripping earlier, so
// summing every grant's entitlement at t is an upper bound.
func (m *model) entitledSum(t time.Time) int64 {
	var sum int64
	for _, g := range m.grants {
		dripEnd := g.End
		if !g.DripEnd.IsZero() {
			dripEnd = g.DripEnd
		}
		switch {
		case !t.After(g.Start):
		case !t.Before(dripEnd):
			sum += g.Amount
		default:
			hi, lo := bits.Mul64(uint64(g.Amount), uint64(t.Sub(g.Start)))
			q, _ := bits.Div64(hi, lo, uint64(dripEnd.Sub(g.Start)))
			sum += int64(q)
		}
	}
	return sum
}

func TestBucketProperties(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			runProperty(t, seed, 500)
		})
	}
}

func runProperty(t *testing.T, seed uint64, ops int) {
	r := rand.New(rand.NewPCG(seed, 0x9ace))
	b := New(r.Int64N(200_000))
	m := &model{grants: map[string]Grant{}, out: map[string]bool{}}
	now := t0
	dur := func(lo, hi float64) time.Duration { // random duration in [lo, hi) seconds
		return time.Duration((lo + r.Float64()*(hi-lo)) * float64(time.Second))
	}
	for i := range ops {
		where := fmt.Sprintf("seed %d op %d", seed, i)
		switch op := r.IntN(100); {
		case op < 15: // the clock moves, sometimes backwards
			now = now.Add(dur(-3, 5))
		case op < 30:
			var g Grant
			if len(m.order) > 0 && r.IntN(10) == 0 {
				g.ID = m.order[r.IntN(len(m.order))]
			} else {
				m.nextID++
				g.ID = fmt.Sprint("g", m.nextID)
			}
			g.Amount = r.Int64N(1_000_000) - 10_000
			g.Start = now.Add(dur(-2, 2))
			g.End = g.Start.Add(dur(-1, 10))
			if r.IntN(3) == 0 { // drips in full before its end; now and then not in (Start, End]
				g.DripEnd = g.Start.Add(time.Duration(r.Float64() * 1.1 * float64(g.End.Sub(g.Start))))
			}
			err := b.AddGrant(now, g)
			hw := m.see(now)
			_, open := m.pending()
			_, known := m.grants[g.ID]
			var want error
			switch {
			case g.Amount <= 0 || !g.End.After(g.Start):
				want = ErrInvalidGrant
			case !g.DripEnd.IsZero() && (!g.DripEnd.After(g.Start) || g.DripEnd.After(g.End)):
				want = ErrInvalidGrant
			case !g.End.After(hw):
				want = ErrGrantExpired
			case known && !m.out[g.ID]:
				want = ErrDuplicateGrant
			case open == MaxFeeds:
				want = ErrTooManyFeeds
			}
			if !errors.Is(err, want) || (err == nil) != (want == nil) {
				t.Fatalf("%s: AddGrant(%+v) at %v (high water %v) = %v; want %v", where, g, now, hw, err, want)
			}
			if err == nil {
				if known { // a handed-back id may be granted again; keep the old grant under another name
					old := fmt.Sprint(g.ID, "#", len(m.order))
					m.order = append(m.order, old)
					m.grants[old] = m.grants[g.ID]
					m.out[old] = true
				} else {
					m.order = append(m.order, g.ID)
				}
				m.grants[g.ID] = g
				m.out[g.ID] = false
			}
		case op < 65:
			n := r.Int64N(100_000)
			before := b.Stats(now)
			ok := b.Spend(now, n)
			if ok != (n > 0 && before.Tokens >= n) {
				t.Fatalf("%s: Spend(%d) = %v with %d tokens", where, n, ok, before.Tokens)
			}
			if ok {
				m.spent += n
			}
		case op < 75:
			n := r.Int64N(100_000)
			got := b.Refund(now, n)
			if got < 0 || got > max(n, 0) {
				t.Fatalf("%s: Refund(%d) = %d", where, n, got)
			}
			m.refunded += got
		case op < 83:
			cs := b.Expire(now)
			hw := m.see(now)
			for _, c := range cs {
				if m.grants[c.ID].End.After(hw) {
					t.Fatalf("%s: Expire returned %q, which ends after %v", where, c.ID, hw)
				}
			}
			m.handBack(t, where, cs)
			if p, open := m.pending(); p != open {
				t.Fatalf("%s: after Expire, %d feeds not handed back but %d open", where, p, open)
			}
		case op < 86:
			cs := b.Revoke(now)
			m.see(now)
			m.handBack(t, where, cs)
			if p, _ := m.pending(); p != 0 {
				t.Fatalf("%s: after Revoke, %d feeds not handed back", where, p)
			}
			if s := b.Stats(now); s.Tokens != 0 || s.OpenFeeds != 0 || s.Reserve != 0 {
				t.Fatalf("%s: after Revoke: %+v", where, s)
			}
		case op < 94:
			if len(m.order) == 0 {
				continue
			}
			id := m.order[r.IntN(len(m.order))]
			c, ok := b.CloseFeed(now, id)
			m.see(now)
			if ok != !m.out[id] {
				t.Fatalf("%s: CloseFeed(%q) = %v; handed back already: %v", where, id, ok, m.out[id])
			}
			if ok {
				m.handBack(t, where, []Closed{c})
			}
		default:
			b.SetCapacity(r.Int64N(300_000) - 1000)
		}

		s := b.Stats(now)
		hw := m.see(now)
		checkStats(t, where, s)
		if s.Spent != m.spent || s.Refunded != m.refunded {
			t.Fatalf("%s: spent %d refunded %d; callers saw %d and %d", where, s.Spent, s.Refunded, m.spent, m.refunded)
		}
		if e := m.entitledSum(hw); s.Spent-s.Refunded > e {
			t.Fatalf("%s: spent net %d ahead of the grants' drip %d", where, s.Spent-s.Refunded, e)
		}
		if _, open := m.pending(); s.OpenFeeds != open {
			t.Fatalf("%s: %d open feeds; want %d", where, s.OpenFeeds, open)
		}
		// No token outlives the leases that back it: what the bucket can
		// still let out is within what its open grants hold.
		if held := m.openAmount(); s.Tokens+s.Reserve > held {
			t.Fatalf("%s: %d tokens and %d reserve; the open grants hold %d", where, s.Tokens, s.Reserve, held)
		}
	}
	// Close the day: every micro is spent or handed back, exactly once.
	m.handBack(t, "final revoke", b.Revoke(now))
	s := b.Stats(now)
	checkStats(t, "final", s)
	if s.Returned != m.unused || s.Granted != s.Spent-s.Refunded+s.Returned {
		t.Fatalf("final: %+v; Unused handed back %d", s, m.unused)
	}
	if p, _ := m.pending(); p != 0 {
		t.Fatalf("final: %d feeds never handed back", p)
	}
}

// TestBucketConcurrent runs spenders, refunders, a feeder and a reader on
// one bucket under a shared clock; run it with -race. The totals the
// callers saw must match the bucket's counters, and every grant must come
// back exactly once.
func TestBucketConcurrent(t *testing.T) {
	b := New(50_000)
	var clock atomic.Int64 // nanoseconds after t0; only the feeder moves it
	tick := func() time.Time { return t0.Add(time.Duration(clock.Load())) }

	const spenders = 4
	var spent, refunded, spends atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range spenders {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + r.Int64N(5_000)
				if b.Spend(tick(), n) {
					spends.Add(1)
					spent.Add(n)
					if r.IntN(4) == 0 {
						refunded.Add(b.Refund(tick(), n/2))
					}
				}
			}
		})
	}
	wg.Go(func() { // a reader: every snapshot is consistent
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := b.Stats(tick())
			if s.Granted != s.Spent-s.Refunded+s.Tokens+s.Reserve+s.Returned || s.Tokens < 0 {
				t.Errorf("inconsistent snapshot %+v", s)
				return
			}
		}
	})

	// The feeder: a renewing lease every few ms of logical time, as the
	// daemon would, with expiries and an occasional early release. It runs
	// until the spenders have had plenty of tokens, however the scheduler
	// interleaves them.
	var closed []Closed
	seen := map[string]bool{}
	for i := 0; spends.Load() < 2000 && i < 1_000_000; i++ {
		now := t0.Add(time.Duration(clock.Add(int64(time.Millisecond))))
		g := Grant{ID: fmt.Sprint("lease-", i), Amount: 40_000, Start: now, End: now.Add(6 * time.Millisecond)}
		if err := b.AddGrant(now, g); err != nil && !errors.Is(err, ErrTooManyFeeds) {
			t.Fatal(err)
		} else if err == nil {
			seen[g.ID] = false
		}
		closed = append(closed, b.Expire(tick())...)
		if i%500 == 499 {
			closed = append(closed, b.Revoke(tick())...)
		}
		if i%7 == 0 {
			if c, ok := b.CloseFeed(tick(), fmt.Sprint("lease-", i-1)); ok {
				closed = append(closed, c)
			}
		}
	}
	close(stop)
	wg.Wait()
	closed = append(closed, b.Revoke(tick())...)

	var unused int64
	for _, c := range closed {
		if done, ok := seen[c.ID]; !ok || done {
			t.Fatalf("feed %q handed back unexpectedly (known %v, twice %v)", c.ID, ok, done)
		}
		seen[c.ID] = true
		unused += c.Unused
	}
	for id, done := range seen {
		if !done {
			t.Errorf("feed %q never handed back", id)
		}
	}
	s := b.Stats(tick())
	checkStats(t, "end", s)
	if s.Spent != spent.Load() || s.Refunded != refunded.Load() || s.Returned != unused || s.Tokens != 0 {
		t.Errorf("end: %+v; callers saw spent %d refunded %d unused %d", s, spent.Load(), refunded.Load(), unused)
	}
	if spends.Load() < 2000 {
		t.Errorf("only %d spends succeeded; the test exercised little", spends.Load())
	}
}
