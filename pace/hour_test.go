package pace

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Conditions 7 and 8 over random inputs: budgets from a micro to a million
// dollars, bids from none to more than the budget, any share of the day
// in the hour, any catch-up multiple.
func TestHourBoundProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 8))
	for i := range 200_000 {
		in := HourInput{
			Budget:          int64(math.Exp(r.Float64() * math.Log(1e12))),
			SharePPB:        r.Int64N(PPB/6 + 1),
			Last:            r.IntN(4) == 0,
			CatchUpPermille: 1000 + r.Int64N(8000),
		}
		in.Bid = r.Int64N(in.Budget/10+1) * int64(r.IntN(8)) / 7
		in.UsualBid = r.Int64N(in.Budget/10+1) * int64(r.IntN(8)) / 7
		b := Hour(in)
		small := float64(in.Budget) <= HourBoundBids*24*float64(in.Bid)
		share := float64(in.Budget) * float64(in.SharePPB) / PPB
		bid := in.UsualBid
		if bid <= 0 {
			bid = in.Bid
		}
		bound := float64(b.Permille) / 1000 * share // what the hour may release
		if !b.NoBid {
			bound += float64(bid)
		}
		switch {
		case !small && !in.Last:
			if b != (HourBound{}) {
				t.Fatalf("#%d %+v: a campaign of more than %d bids an hour, not its last: bound %+v, want none", i, in, HourBoundBids, b)
			}
		case !in.Last:
			if b.Permille != min(in.CatchUpPermille, HourPermille) || b.NoBid || b.Bid != in.UsualBid {
				t.Fatalf("#%d %+v: a small campaign's hour: %+v, want the less of the catch-up and %d permille and its usual bid", i, in, b, HourPermille)
			}
		case small:
			// Its last hour admits its usual bid over its share, as its
			// other hours do: with none, a SPEND over 1.5x a last hour
			// worth less than a bid could never be served in it.
			if b.Permille != min(in.CatchUpPermille, LastHourPermille) || b.NoBid || b.Bid != in.UsualBid {
				t.Fatalf("#%d %+v: a small campaign's last hour: %+v, want the less of the catch-up and %d permille and its usual bid", i, in, b, LastHourPermille)
			}
		default:
			want := min(float64(LastHourPermille)/1000*share+float64(bid), float64(LastHourExactPermille)/1000*share)
			if bid <= 0 {
				want = float64(LastHourExactPermille) / 1000 * share
			}
			if math.Abs(bound-want) > 1e-6*max(want, 1) {
				t.Fatalf("#%d %+v: the last hour may release %.0f (%+v), want the less of 1.3x its share and a bid and 1.5x with none, %.0f", i, in, bound, b, want)
			}
		}
		if in.Last && bound > float64(LastHourExactPermille)/1000*share+float64(max(bid, 0))+1e-6*share {
			t.Fatalf("#%d %+v: the last hour may release %.0f, over 1.5x its share %.0f and a bid %d", i, in, bound, share, bid)
		}
	}
}
