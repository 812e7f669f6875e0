package reconcile

// roster is the term's campaign ids in the order the slow sweep visits them:
// the order they were learned in. Adding an id appends it and removing one
// leaves a hole, compacted away once holes are half the slice, so both are
// amortised O(1) and a burst of 10,000 new campaigns costs the leader
// microseconds under its lock, not a re-sort of every id per addition (the
// 28 s stall at 9,000 additions that this replaced). The sweep's cursor
// keeps its place across both. Not safe for concurrent use: the
// Reconciler's mu guards it.
type roster struct {
	ids    []string // "" is a hole
	at     map[string]int
	holes  int
	cursor int // the next position the sweep looks at
}

func newRoster(ids []string) roster {
	o := roster{ids: make([]string, 0, len(ids)), at: make(map[string]int, len(ids))}
	for _, id := range ids {
		o.add(id)
	}
	return o
}

// len is how many ids the roster holds.
func (o *roster) len() int { return len(o.ids) - o.holes }

func (o *roster) add(id string) {
	if _, ok := o.at[id]; ok || id == "" {
		return
	}
	o.at[id] = len(o.ids)
	o.ids = append(o.ids, id)
}

func (o *roster) remove(id string) {
	i, ok := o.at[id]
	if !ok {
		return
	}
	delete(o.at, id)
	o.ids[i] = ""
	o.holes++
	if o.holes*2 > len(o.ids) {
		o.compact()
	}
}

// compact drops the holes, keeping the order and the cursor's place.
func (o *roster) compact() {
	keep, cursor := o.ids[:0], 0
	for i, id := range o.ids {
		if id == "" {
			continue
		}
		if i < o.cursor {
			cursor++
		}
		o.at[id] = len(keep)
		keep = append(keep, id)
	}
	clear(o.ids[len(keep):])
	o.ids, o.holes, o.cursor = keep, 0, cursor
}

// next returns the next k ids of the sweep (fewer if the roster holds
// fewer), wrapping around, and moves the cursor past them.
func (o *roster) next(k int) []string {
	k = min(k, o.len())
	out := make([]string, 0, k)
	for len(out) < k {
		if o.cursor >= len(o.ids) {
			o.cursor = 0
		}
		if id := o.ids[o.cursor]; id != "" {
			out = append(out, id)
		}
		o.cursor++
	}
	return out
}

// all calls f with each id in order until f returns false.
func (o *roster) all(f func(id string) bool) {
	for _, id := range o.ids {
		if id != "" && !f(id) {
			return
		}
	}
}
