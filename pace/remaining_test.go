package pace

import (
	"math/rand/v2"
	"testing"
)

// Condition 22 over random readings: answers read now are not stale; an
// answer is stale by its shard's release along the curve since it was
// read, at most what it said it had; what is stale only grows as the curve
// moves on.
func TestStaleProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 22))
	for i := range rounds {
		n := 1 + r.IntN(16)
		now := r.Int64N(PPB + 1)
		rs := make([]ShardReading, n)
		var said, released int64
		for s := range rs {
			b := r.Int64N(1e12)
			at := max(now-r.Int64N(PPB/8+1), 0)
			rs[s] = ShardReading{Left: r.Int64N(b + 1), Budget: b, CurveAt: at}
			said += rs[s].Left
			released += mulPPB(b, now-at)
		}
		got := Stale(rs, now)
		if got < 0 || got > said || got > released {
			t.Fatalf("#%d: Stale = %d, want within [0, min(%d said, %d released since)]", i, got, said, released)
		}
		fresh := make([]ShardReading, n)
		for s, rd := range rs {
			fresh[s] = rd
			fresh[s].CurveAt = now
		}
		if f := Stale(fresh, now); f != 0 {
			t.Fatalf("#%d: answers read now: Stale = %d, want 0", i, f)
		}
		if later := Stale(rs, min(now+r.Int64N(PPB/8+1), PPB)); later < got {
			t.Fatalf("#%d: Stale fell from %d to %d as the curve moved on", i, got, later)
		}
	}
}

// Condition 22 in the plan: whether the day is Catching is judged by the
// answers as said; a day catching up is planned as if nothing were stale;
// one that is not, as if the shards had said what they said less what is
// stale, so that what is stale never raises the fleet's window.
func TestStaleAnswersDoNotMakeTheDayBehind(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 23))
	for range rounds {
		in := randomInput(r)
		in.Stale = r.Int64N(max(in.Remaining, 0) + 1)
		said := in
		said.Stale = 0
		d, ds := Plan(in), Plan(said)
		if d.Catching != ds.Catching {
			t.Fatalf("catching %v, %v as said: judged by the answers as said: %+v", d.Catching, ds.Catching, in)
		}
		if d.FleetWindow > ds.FleetWindow {
			t.Fatalf("fleet window %d above %d as said: what is stale raised it: %+v", d.FleetWindow, ds.FleetWindow, in)
		}
		if ds.Catching || in.CurveNow >= PPB {
			if d != ds {
				t.Fatalf("catching (or past the curve): %+v, want as said %+v: %+v", d, ds, in)
			}
			continue
		}
		less := said
		less.Remaining -= in.Stale
		dl := Plan(less)
		if d.FleetWindow != dl.FleetWindow || d.FleetPace != dl.FleetPace || d.Behind != dl.Behind {
			t.Fatalf("fleet %d/%d behind %v; want as if the shards had said %d: %d/%d %v: %+v",
				d.FleetWindow, d.FleetPace, d.Behind, less.Remaining, dl.FleetWindow, dl.FleetPace, dl.Behind, in)
		}
	}
}
