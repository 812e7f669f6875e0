package bucket

import (
	"errors"
	"fmt"
	"math"
)

// Fitting a curve to observed demand: pacerctl curve fit, and the daemons'
// curve "auto", which refit a campaign's curve every day from the demand its
// fleet recorded.

// FitOptions tune FitCurve.
type FitOptions struct {
	Slots  int     // the fitted curve's slot count
	Smooth int     // half-width of the moving average, in input slots; < 0: default
	Min    float64 // least share of a slot, times the mean share (0 < Min <= 1)
	Max    float64 // largest share of a slot, times the mean share (Max >= 1)
}

// DefaultSmooth is the moving average's half-width for n input slots: one
// slot of 24 or 48, two of 96 (30 minutes), thirty of 1440.
func DefaultSmooth(n int) int { return max(1, n/48) }

// FitCurve turns demand per slot of a local day (24, 48, 96 or 1440 slots,
// summed over the days observed) into a curve of o.Slots slots:
//
//  1. smoothed by a triangular moving average of half-width o.Smooth slots
//     that stays within the day: a slot near midnight averages over the
//     slots of its own day only (a day's budget cannot meet the next day's
//     demand, so 00:00's traffic gives 23:45 no share);
//  2. normalised to shares that sum to 1;
//  3. bounded: each share is clip(c*share, Min/n, Max/n) with the one
//     scale c that makes them sum to 1 again (found by bisection: this is
//     the fixed point of clipping and renormalising until nothing moves), so
//     no slot is starved, a zero-demand slot gets the floor, and none takes an
//     extreme share;
//  4. resampled to o.Slots by summing (fewer slots) or splitting evenly
//     (more), which keeps the bounds relative to the mean share.
//
// It returns the curve and its weights (shares summing to 1).
func FitCurve(name string, demand []float64, o FitOptions) (*Curve, []float64, error) {
	n := len(demand)
	if !validSlotCount(n) {
		return nil, nil, fmt.Errorf("%d slots of demand; want 24, 48, 96 or 1440", n)
	}
	if !validSlotCount(o.Slots) {
		return nil, nil, fmt.Errorf("%d slots for the curve; want 24, 48, 96 or 1440", o.Slots)
	}
	if !(o.Min > 0 && o.Min <= 1) || !(o.Max >= 1) {
		return nil, nil, fmt.Errorf("bounds %vx to %vx the mean share: want 0 < min <= 1 <= max", o.Min, o.Max)
	}
	var total float64
	for i, d := range demand {
		if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
			return nil, nil, fmt.Errorf("slot %d: demand %v: want a finite number >= 0", i, d)
		}
		total += d
	}
	if total == 0 {
		return nil, nil, errors.New("no demand observed: every slot is 0")
	}
	h := o.Smooth
	if h < 0 {
		h = DefaultSmooth(n)
	}
	shares := normalise(smooth(demand, h))
	shares = bound(shares, o.Min/float64(n), o.Max/float64(n))
	weights := resample(shares, o.Slots)
	c, err := NewCurve(name, weights)
	if err != nil {
		return nil, nil, err
	}
	return c, weights, nil
}

func validSlotCount(n int) bool { return n == 24 || n == 48 || n == 96 || n == 1440 }

// smooth returns the moving average of x with triangular weights h+1-|k|
// for k in [-h, h], over the slots of x only: at either end the weights
// that would fall outside are left out (not wrapped round).
func smooth(x []float64, h int) []float64 {
	n := len(x)
	h = min(h, (n-1)/2)
	out := make([]float64, n)
	for i := range x {
		var sum, wsum float64
		for k := max(-h, -i); k <= h && i+k < n; k++ {
			w := float64(h + 1 - abs(k))
			sum += w * x[i+k]
			wsum += w
		}
		out[i] = sum / wsum
	}
	return out
}

func abs(k int) int {
	if k < 0 {
		return -k
	}
	return k
}

func normalise(x []float64) []float64 {
	var sum float64
	for _, v := range x {
		sum += v
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v / sum
	}
	return out
}

// bound returns shares (summing to 1) clipped to [lo, hi] and rescaled so
// they still sum to 1: clip(c*s, lo, hi) for the scale c that makes the sum
// 1. The sum is continuous and non-decreasing in c, n*lo <= 1 at c = 0, so
// bisection finds c. If even the largest c falls short (nearly all demand in
// a few slots, many slots empty), those few get hi and the empty slots share
// the rest equally, which lies between lo and hi.
func bound(shares []float64, lo, hi float64) []float64 {
	n := len(shares)
	minPos := math.Inf(1)
	for _, s := range shares {
		if s > 0 {
			minPos = min(minPos, s)
		}
	}
	clipped := func(c float64) ([]float64, float64) {
		out := make([]float64, n)
		var sum float64
		for i, s := range shares {
			out[i] = min(max(c*s, lo), hi)
			sum += out[i]
		}
		return out, sum
	}
	cMax := hi / minPos // every positive share clips to hi
	out, sum := clipped(cMax)
	if sum < 1 {
		zeros := 0
		for _, s := range shares {
			if s == 0 {
				zeros++
			}
		}
		rest := (1 - float64(n-zeros)*hi) / float64(zeros)
		for i, s := range shares {
			if s == 0 {
				out[i] = rest
			}
		}
		return out
	}
	cLo, cHi := 0.0, cMax
	for range 200 {
		mid := (cLo + cHi) / 2
		if _, s := clipped(mid); s < 1 {
			cLo = mid
		} else {
			cHi = mid
		}
	}
	out, _ = clipped(cHi)
	return normalise(out) // removes the last rounding; moves a share by ~1e-16
}

// resample sums groups of slots (to fewer slots) or splits each evenly (to
// more). Every valid slot count divides or is divided by every other.
func resample(x []float64, slots int) []float64 {
	n := len(x)
	out := make([]float64, slots)
	if slots <= n {
		per := n / slots
		for i, v := range x {
			out[i/per] += v
		}
		return out
	}
	per := slots / n
	for i := range out {
		out[i] = x[i/per] / float64(per)
	}
	return out
}
