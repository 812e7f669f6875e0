package sim

import (
	"math"
	"slices"
	"sort"
	"time"
)

// The metric functions are pure: the run collects counters and samples, and
// these turn them into the figures docs/SIMULATION.md defines.

// Utilisation is spent / budget (0 for a zero budget).
func Utilisation(spentMicros, budgetMicros int64) float64 {
	if budgetMicros <= 0 {
		return 0
	}
	return float64(spentMicros) / float64(budgetMicros)
}

// Overspend is allowed - refunded - budget, in micros: positive means the
// strategy let the campaign spend more than its budget.
func Overspend(allowedMicros, refundedMicros, budgetMicros int64) int64 {
	return allowedMicros - refundedMicros - budgetMicros
}

// TrackingError returns the maximum and the root mean square of
// |actual[i] - target[i]| over the samples, where both are cumulative shares
// of the budget (0..1). Empty input gives 0, 0.
func TrackingError(actual, target []float64) (maxErr, rms float64) {
	n := min(len(actual), len(target))
	if n == 0 {
		return 0, 0
	}
	var sum float64
	for i := range n {
		e := math.Abs(actual[i] - target[i])
		maxErr = max(maxErr, e)
		sum += e * e
	}
	return maxErr, math.Sqrt(sum / float64(n))
}

// Smoothness is the coefficient of variation (population standard deviation
// over mean) of spent[i] / planned[i] over the slots with planned > 0: 0 when
// every slot delivers the same fraction of its plan. It is 0 when no slot has
// a plan or nothing was spent.
func Smoothness(spent, planned []int64) float64 {
	var ratios []float64
	for i := range min(len(spent), len(planned)) {
		if planned[i] > 0 {
			ratios = append(ratios, float64(spent[i])/float64(planned[i]))
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	var mean float64
	for _, r := range ratios {
		mean += r
	}
	mean /= float64(len(ratios))
	if mean == 0 {
		return 0
	}
	var v float64
	for _, r := range ratios {
		v += (r - mean) * (r - mean)
	}
	return math.Sqrt(v/float64(len(ratios))) / mean
}

// SlotDeltas turns cumulative values at slot edges (len slots+1) into
// per-slot amounts.
func SlotDeltas(cumAtEdges []int64) []int64 {
	if len(cumAtEdges) < 2 {
		return nil
	}
	out := make([]int64, len(cumAtEdges)-1)
	for i := range out {
		out[i] = cumAtEdges[i+1] - cumAtEdges[i]
	}
	return out
}

// Percentiles returns the p-quantiles (0 < p <= 1) of samples by the
// nearest-rank method; it sorts samples in place.
func Percentiles(samples []time.Duration, ps ...float64) []time.Duration {
	out := make([]time.Duration, len(ps))
	if len(samples) == 0 {
		return out
	}
	slices.Sort(samples)
	for i, p := range ps {
		rank := int(math.Ceil(p*float64(len(samples)))) - 1
		out[i] = samples[min(max(rank, 0), len(samples)-1)]
	}
	return out
}

func sortStrings(s []string) { sort.Strings(s) }
