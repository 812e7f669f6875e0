package pace

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// Condition 12 over random gates: a host holding leases asks at most once
// a MinGrantGap, unless it renews or replaces a lease or its demand jumped.
func TestMayAskProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 12))
	for i := range 200_000 {
		g := Gate{SinceGrant: time.Duration(r.Int64N(int64(3 * MinGrantGap))), Holding: r.IntN(2) == 0,
			Jumped: r.IntN(4) == 0, Renewing: r.IntN(4) == 0}
		got := MayAsk(g)
		switch {
		case !g.Holding || g.SinceGrant >= MinGrantGap:
			if !got {
				t.Fatalf("#%d %+v: held back with no lease held or past the gap", i, g)
			}
		case g.Jumped || g.Renewing:
			if !got {
				t.Fatalf("#%d %+v: a renewal or the first ask after a jump is held back by the gap", i, g)
			}
		case got:
			t.Fatalf("#%d %+v: a second regular ask within the gap while leases drip", i, g)
		}
	}
}

// Condition 13 over random answers.
func TestHoldAfterProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 13))
	for i := range 200_000 {
		a := Answer{Want: 1 + r.Int64N(1e9), Standing: r.IntN(3) == 0, Supplied: r.IntN(2) == 0,
			Window: time.Duration(8+r.Int64N(120)) * time.Second, Starting: r.IntN(3) == 0}
		switch r.IntN(3) {
		case 0:
			a.Granted = 0
		case 1:
			a.Granted = a.Want
		default:
			a.Granted = r.Int64N(a.Want)
		}
		h := HoldAfter(a)
		var want time.Duration
		switch {
		case a.Granted == a.Want:
			want = 0 // all it asked: nothing to wait for
		case a.Granted == 0 && a.Standing:
			want = a.Window
		case a.Granted == 0 && a.Starting:
			want = MinGrantGap // a day's start: the next shards a gap later
		case a.Granted == 0:
			want = a.Window / 8
		case a.Standing || a.Supplied:
			want = a.Window / 4
		}
		if h != want {
			t.Fatalf("#%d %+v: hold %v, want %v", i, a, h, want)
		}
		if a.Granted == 0 && !a.Starting && h < a.Window/8 {
			t.Fatalf("#%d %+v: a shard with nothing asked again after %v, under an eighth of a window", i, a, h)
		}
		if h > a.Window {
			t.Fatalf("#%d %+v: hold %v, over a lease window", i, a, h)
		}
	}
}

// Condition 14 over random grants: the drip stays within the lease, it
// credits at once at least what it carries on or its start credit, no more
// unless it is credited whole or it is the shard's last, whole only for the
// stated reasons, and a shard's last lease is dripped a quarter window
// before its end.
// A late lease's credit (condition 14) is what it would have dripped from
// its predecessor's end, at most a burst window back, at the rate of the
// rest of its drip: never more than its grant, nothing when not late, and
// no faster than the lease drips after its grant.
func TestLateCreditProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 14))
	for i := range 200_000 {
		granted := int64(math.Exp(r.Float64() * math.Log(1e15)))
		late := time.Duration(r.Int64N(int64(5*time.Second))) - time.Second
		burst := time.Duration(1 + r.Int64N(int64(3*time.Second)))
		span := time.Duration(r.Int64N(int64(120 * time.Second)))
		got := LateCredit(granted, late, burst, span)
		l := min(late, burst)
		if got < 0 || got > max(granted, 0) {
			t.Fatalf("#%d LateCredit(%d, %v, %v, %v) = %d: want 0 to the grant", i, granted, late, burst, span, got)
		}
		if l <= 0 {
			if got != 0 {
				t.Fatalf("#%d LateCredit(%d, %v, %v, %v) = %d: want 0, not late", i, granted, late, burst, span, got)
			}
			continue
		}
		// got = floor(granted × l / (span + l)), exactly.
		want := new(big.Int).Div(new(big.Int).Mul(big.NewInt(granted), big.NewInt(int64(l))), big.NewInt(int64(span+l)))
		if want.Cmp(big.NewInt(got)) != 0 {
			t.Fatalf("#%d LateCredit(%d, %v, %v, %v) = %d, want %v", i, granted, late, burst, span, got, want)
		}
		// At the rate of the rest: got / l ≤ (granted − got) / span.
		lhs := new(big.Int).Mul(big.NewInt(got), big.NewInt(int64(span)))
		rhs := new(big.Int).Mul(big.NewInt(granted-got), big.NewInt(int64(l)))
		if lhs.Cmp(rhs) > 0 {
			t.Fatalf("#%d LateCredit(%d, %v, %v, %v) = %d: faster than the rest of its drip", i, granted, late, burst, span, got)
		}
		if more := LateCredit(granted, late+time.Second, burst, span); more < got || (late >= burst && more != got) {
			t.Fatalf("#%d LateCredit later by a second %d, from %d: want more or the same, the same past a burst window", i, more, got)
		}
	}
}

func TestDripProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 14))
	for i := range 200_000 {
		in := DripInput{Granted: 1 + int64(math.Exp(r.Float64()*math.Log(1e12))), Standing: r.IntN(8) == 0,
			LastOfShard: r.IntN(4) == 0, Window: time.Duration(4+r.Int64N(120)) * time.Second,
			Burst: time.Duration(1+r.Int64N(5000)) * time.Millisecond}
		in.Span = time.Duration(r.Int64N(int64(in.Window) + 1))
		in.Bid = r.Int64N(in.Granted/4+1) * int64(r.IntN(6)) / 4
		switch r.IntN(3) {
		case 0:
		case 1:
			in.AtOnce = r.Int64N(in.Granted + 1)
		default:
			in.AtOnce = in.Granted - r.Int64N(in.Granted/50+1)
		}
		from, to := Drip(in)
		if from > 0 || to < 0 || from >= to || to > max(in.Span, 0) {
			t.Fatalf("#%d %+v: drip from %v to %v: want from ≤ 0 ≤ to ≤ span, from < to", i, in, from, to)
		}
		share := float64(-from) / float64(to-from) // credited at once
		eps := max(1e-6, 2/float64(to-from))       // a nanosecond's rounding of from
		f := float64(in.AtOnce) / float64(in.Granted)
		whole := to == 0
		last := in.LastOfShard && in.Span > in.Window/4 // a last lease with room to drip
		wantWhole := in.Granted <= in.Bid || in.Standing || in.Span <= 0 || (f >= wholeShare && !last) ||
			(in.LastOfShard && in.Span <= in.Window/4)
		if whole != wantWhole {
			t.Fatalf("#%d %+v (at once %.4f): credited whole %v, want %v", i, in, f, whole, wantWhole)
		}
		if whole {
			continue
		}
		if f >= wholeShare { // a shard's last: a burst window back, a quarter window before its end
			if from != -in.Burst || to != in.Span-in.Window/4 {
				t.Fatalf("#%d %+v: a shard's last lease nearly all credited at once drips from %v to %v", i, in, from, to)
			}
			continue
		}
		// What the bucket credits at once, Granted × −from / (to − from)
		// rounded down, is at least AtOnce: not a micro less (a start
		// credit of one SPEND must serve that SPEND).
		if g := new(big.Int).Div(new(big.Int).Mul(big.NewInt(in.Granted), big.NewInt(int64(-from))), big.NewInt(int64(to-from))); g.Cmp(big.NewInt(min(in.AtOnce, in.Granted))) < 0 {
			t.Fatalf("#%d %+v: credits %v micros at once, under the %d it carries on or starts with", i, in, g, in.AtOnce)
		}
		if share < f-eps {
			t.Fatalf("#%d %+v: credits %.6f at once, under the %.6f it carries on or starts with", i, in, share, f)
		}
		if !in.LastOfShard && share > f+eps {
			t.Fatalf("#%d %+v: credits %.6f at once, over the %.6f it carries on or starts with", i, in, share, f)
		}
		if in.LastOfShard && to != in.Span-in.Window/4 {
			t.Fatalf("#%d %+v: a shard's last lease drips to %v, want a quarter window before its end (%v)", i, in, to, in.Span-in.Window/4)
		}
		if !in.LastOfShard && to != in.Span {
			t.Fatalf("#%d %+v: drips to %v, want its end %v", i, in, to, in.Span)
		}
	}
}
