package sim

import (
	"math"
	"math/rand/v2"
)

// poisson draws a Poisson(lambda) count: Knuth's product method for small
// lambda, Hörmann's transformed rejection (PTRS) above 10.
func poisson(r *rand.Rand, lambda float64) int {
	return poissonExp(r, lambda, poissonLimit(lambda))
}

// poissonLimit is what poissonExp needs besides lambda: exp(-lambda) for
// Knuth's method (lambda below 10), computed once for the many draws of
// one mean (a step's arrival ticks of a campaign on a host).
func poissonLimit(lambda float64) float64 {
	if lambda <= 0 || lambda >= 10 {
		return 0
	}
	return math.Exp(-lambda)
}

// poissonExp is poisson with l = poissonLimit(lambda) given: the same
// draws from r.
func poissonExp(r *rand.Rand, lambda, l float64) int {
	switch {
	case lambda <= 0:
		return 0
	case lambda < 10:
		k, p := 0, r.Float64()
		for p > l {
			k++
			p *= r.Float64()
		}
		return k
	}
	slam := math.Sqrt(lambda)
	loglam := math.Log(lambda)
	b := 0.931 + 2.53*slam
	a := -0.059 + 0.02483*b
	invalpha := 1.1239 + 1.1328/(b-3.4)
	vr := 0.9277 - 3.6224/(b-2)
	for {
		u := r.Float64() - 0.5
		v := r.Float64()
		us := 0.5 - math.Abs(u)
		k := math.Floor((2*a/us+b)*u + lambda + 0.43)
		if us >= 0.07 && v <= vr {
			return int(k)
		}
		if k < 0 || (us < 0.013 && v > us) {
			continue
		}
		lg, _ := math.Lgamma(k + 1)
		if math.Log(v)+math.Log(invalpha)-math.Log(a/(us*us)+b) <= -lambda+k*loglam-lg {
			return int(k)
		}
	}
}

// bidder draws bid amounts in micros. A lognormal bid is read from a table
// of the distribution's quantiles at 2^16 evenly spaced probabilities (the
// inverse CDF, discretised), because math.Exp per SPEND was a tenth of the
// run's CPU.
type bidder struct {
	table    []int64 // lognormal quantiles; nil for uniform
	lo, span int64
}

const bidTableBits = 12 // 4,096 quantiles: fine-grained enough, and 32 KiB stays in L1

func newBidder(b Bids) bidder {
	if b.Dist == "uniform" {
		return bidder{lo: b.MinMicros, span: b.MaxMicros - b.MinMicros + 1}
	}
	// E[exp(N(mu, sigma^2))] = exp(mu + sigma^2/2) = mean.
	mu := math.Log(float64(b.MeanMicros)) - b.Sigma*b.Sigma/2
	t := make([]int64, 1<<bidTableBits)
	for i := range t {
		p := (float64(i) + 0.5) / float64(len(t))
		z := -math.Sqrt2 * math.Erfcinv(2*p)
		t[i] = max(int64(math.Exp(mu+b.Sigma*z)+0.5), 1)
	}
	return bidder{table: t}
}

func (b bidder) draw(r *rand.Rand) int64 {
	if b.table != nil {
		return b.table[r.Uint64()>>(64-bidTableBits)]
	}
	return b.lo + r.Int64N(b.span)
}

// typicalMax is the bid distribution's 95th percentile: what an operator
// would give as the campaign's typical largest bid.
func (b bidder) typicalMax() int64 {
	if b.table != nil {
		return b.table[len(b.table)*95/100]
	}
	return b.lo + b.span*95/100
}

// mean is the bid distribution's mean, as drawn (the quantile table's).
func (b bidder) mean() float64 {
	if b.table == nil {
		return float64(b.lo) + float64(b.span-1)/2
	}
	var sum float64
	for _, v := range b.table {
		sum += float64(v)
	}
	return sum / float64(len(b.table))
}
