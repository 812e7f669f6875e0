package daemon

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The stripe's ring and open-addressing index against a model: every
// remembered key is found at its record, every forgotten one is not, the
// oldest go first, and memory never exceeds the bound. Keys are drawn from a
// small space, with few index bits, so probe runs collide and wrap and
// backward-shift deletion is exercised.
func TestAuctionStripeAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := newAuctionMemory(time.Hour, 4<<10)
		if len(m.stripes) != 1 {
			t.Fatalf("%d stripes for 4 KiB", len(m.stripes))
		}
		s := &m.stripes[0]
		// The model: records in insertion order (dropped ones stay, as in
		// the ring) and the live ones by key.
		type rec struct {
			key  auctionKey
			live bool
		}
		var queue []*rec
		live := map[auctionKey]*rec{}
		at := map[auctionKey]int64{}
		evictions := 0
		for now := int64(1); now < 5000; now++ {
			k := auctionKey{lo: uint64(rng.IntN(300))<<1 | 1}
			pos, found := s.find(k)
			switch {
			case found != (live[k] != nil):
				t.Fatalf("seed %d: key %v found=%v, model live=%v", seed, k, found, live[k] != nil)
			case found && s.ring[pos].at != at[k]:
				t.Fatalf("seed %d: key %v at %d, model %d", seed, k, s.ring[pos].at, at[k])
			case found && rng.IntN(2) == 0:
				s.drop(pos)
				live[k].live = false
				delete(live, k)
			case !found:
				if len(queue) == s.maxRecords {
					if queue[0].live {
						delete(live, queue[0].key) // the oldest goes first
					}
					queue = queue[1:]
					evictions++
				}
				s.insert(now, int64(time.Hour), auctionRecord{key: k, at: now, charged: 1, left: 1})
				r := &rec{key: k, live: true}
				queue = append(queue, r)
				live[k], at[k] = r, now
			}
			if s.n != len(queue) {
				t.Fatalf("seed %d: ring holds %d records, model %d", seed, s.n, len(queue))
			}
			if bytes := int64(len(s.ring))*recordBytes + int64(len(s.index))*indexBytes; bytes > 4<<10 {
				t.Fatalf("seed %d: %d bytes, bound 4096", seed, bytes)
			}
		}
		if evictions == 0 {
			t.Fatalf("seed %d: the bound (%d records) was never reached", seed, s.maxRecords)
		}
		for k := range live {
			if _, found := s.find(k); !found {
				t.Fatalf("seed %d: remembered key %v not found", seed, k)
			}
		}
	}
}

// A flood of ids keeps memory within the bound and forgets the oldest first;
// the window then kept is what stats reports.
func TestAuctionMemoryBound(t *testing.T) {
	const bound = 1 << 20
	m := newAuctionMemory(10*time.Minute, bound)
	salt := newSalt()
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	const ids, every = 100_000, 100 * time.Microsecond // 10,000 ids a second
	for i := range ids {
		k := m.key(salt, "auction-"+itoa(i))
		s := m.stripe(k)
		t := start.Add(time.Duration(i) * every).UnixNano()
		s.insert(t, m.window, auctionRecord{key: k, at: t, charged: 1, left: 1})
	}
	now := start.Add(ids * every)
	st := m.stats(now)
	t.Logf("%d stripes, %+v", len(m.stripes), st)
	if st.MemoryBytes > bound {
		t.Fatalf("memory %d bytes over the bound %d", st.MemoryBytes, bound)
	}
	if st.MemoryBytes < bound/2 {
		t.Errorf("memory %d bytes: less than half the bound used", st.MemoryBytes)
	}
	// Every id younger than the reported window is remembered; the oldest
	// are not.
	if st.Window <= 0 || st.Window >= 10*time.Second {
		t.Fatalf("window kept %v; the bound holds about %d ids", st.Window, st.Remembered)
	}
	for i := range ids {
		at := start.Add(time.Duration(i) * every)
		k := m.key(salt, "auction-"+itoa(i))
		_, found := m.stripe(k).find(k)
		if now.Sub(at) < st.Window && !found {
			t.Fatalf("id %d, %v old, inside the reported window %v, forgotten", i, now.Sub(at), st.Window)
		}
		if i == 0 && found {
			t.Fatal("the oldest id is still remembered past the bound")
		}
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
