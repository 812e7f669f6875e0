package reconcile

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// The sweep's order keeps its place through additions and removals, and
// visits every id once per round, whatever was added or removed meanwhile.
func TestRosterKeepsTheSweepsPlace(t *testing.T) {
	o := newRoster([]string{"a", "b", "c", "d", "e", "f"})
	if got := o.next(2); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("next(2) = %v", got)
	}
	o.remove("a") // behind the cursor
	o.remove("d") // ahead of it
	o.add("g")
	o.add("c") // known: not added twice
	if got := o.next(3); !slices.Equal(got, []string{"c", "e", "f"}) {
		t.Fatalf("after removals, next(3) = %v", got)
	}
	o.remove("b")
	o.remove("e") // 4 holes of 7: compacted
	if o.holes != 0 || len(o.ids) != 3 {
		t.Fatalf("not compacted: %q, %d holes", o.ids, o.holes)
	}
	if got := o.next(4); !slices.Equal(got, []string{"g", "c", "f"}) {
		t.Fatalf("after compaction, next(4) = %v (the cursor lost its place)", got)
	}

	r := rand.New(rand.NewPCG(1, 2))
	live := map[string]bool{}
	o = newRoster(nil)
	for i := range 20_000 {
		id := strconv.Itoa(r.IntN(5_000))
		if r.IntN(3) == 0 {
			o.remove(id)
			delete(live, id)
		} else {
			o.add(id)
			live[id] = true
		}
		if i%1000 == 0 {
			o.next(r.IntN(100))
			if o.len() != len(live) {
				t.Fatalf("len %d, want %d", o.len(), len(live))
			}
			round := o.next(o.len())
			seen := map[string]bool{}
			for _, id := range round {
				if seen[id] || !live[id] {
					t.Fatalf("a round visited %q twice or after its removal", id)
				}
				seen[id] = true
			}
			if len(seen) != len(live) {
				t.Fatalf("a round visited %d ids of %d", len(seen), len(live))
			}
		}
	}
	if o.holes*2 > len(o.ids) {
		t.Fatalf("%d holes in %d slots", o.holes, len(o.ids))
	}
}

// Adding 10,000 ids to 100,000 costs amortised O(1) each: the slice grows by
// appends, nothing is re-sorted (the reconciler holds its lock meanwhile).
func BenchmarkRosterAdd(b *testing.B) {
	ids := make([]string, 110_000)
	for i := range ids {
		ids[i] = "c" + strconv.Itoa(i)
	}
	for range b.N {
		o := newRoster(ids[:100_000])
		b.StartTimer()
		for _, id := range ids[100_000:] {
			o.add(id)
		}
		b.StopTimer()
	}
}
