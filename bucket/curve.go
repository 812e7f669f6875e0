// Package bucket owns the daemon's in-memory money arithmetic: pacing curves
// (how a campaign's daily budget is spread over its local day) and the
// per-campaign token bucket that the SPEND hot path checks and decrements.
//
// Money is int64 micros and curve shares are integer parts-per-billion; no
// float ever reaches a balance. Time is always a parameter, as in
// golang.org/x/time/rate's AllowN(t, n): nothing in this package reads the
// clock, so tests and the simulator can replay a whole day at fixed instants.
//
// The package imports only the standard library, so the ledger, the daemon
// and pacerctl can all share the same arithmetic.
package bucket

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// PPB is the unit of curve shares: parts per billion of a day's budget.
// Integer PPB keeps the ledger's release arithmetic exact, where float
// fractions would create or lose micros.
const PPB int64 = 1_000_000_000

// maxCurveName bounds curve names so they stay usable as Redis keys,
// metric labels and file names.
const maxCurveName = 64

// Curve is a pacing curve: non-negative weights over equal slots of a local
// day, held as integer PPB shares and their cumulative sums.
//
// The cumulative curve is piecewise linear between slot edges, so budget
// released along it has no steps at the edges: a fleet of hosts waking at
// the top of the hour sees no lump to race for.
//
// A Curve is immutable once built and safe for concurrent use. The zero
// value is not usable; build one with NewCurve or Flat.
type Curve struct {
	name       string
	weights    []float64 // normalised, for display only
	cumulative []int64   // len slots+1, [0] = 0, [slots] = PPB
}

// CurveError reports why NewCurve rejected its input. Slot is the offending
// slot index, or -1 when the problem is not one slot's.
type CurveError struct {
	Name   string
	Slot   int
	Reason string
}

func (e *CurveError) Error() string {
	if e.Slot >= 0 {
		return fmt.Sprintf("bucket: curve %q: slot %d: %s", e.Name, e.Slot, e.Reason)
	}
	return fmt.Sprintf("bucket: curve %q: %s", e.Name, e.Reason)
}

// validSlots reports whether n is a slot count a curve may have. Each one
// divides a 24-hour day into whole minutes, which operators can reason
// about; the curve itself stretches with 23- and 25-hour days.
func validSlots(n int) bool {
	switch n {
	case 24, 48, 96, 1440:
		return true
	}
	return false
}

// NewCurve validates weights and builds the curve named name.
//
// The name must be 1 to 64 characters of [a-z0-9_-]. There must be 24, 48,
// 96 or 1440 weights, one per equal slot of the local day, each finite and
// non-negative, with a positive sum. Only the ratios matter: weights are
// normalised, then converted to integer PPB shares that sum to exactly PPB
// by the largest-remainder method (ties go to the earlier slot), so the same
// weights always give the same shares on every host. A slot with weight 0
// gets share 0.
//
// Errors are of type *CurveError.
func NewCurve(name string, weights []float64) (*Curve, error) {
	if err := checkCurveName(name); err != nil {
		return nil, err
	}
	if !validSlots(len(weights)) {
		return nil, &CurveError{Name: name, Slot: -1,
			Reason: fmt.Sprintf("%d weights; want 24, 48, 96 or 1440", len(weights))}
	}
	// Scale by the largest weight first: the sum of weights near MaxFloat64
	// would overflow to +Inf, while the scaled ones sum to at most len.
	var maxW float64
	for i, w := range weights {
		switch {
		case math.IsNaN(w):
			return nil, &CurveError{Name: name, Slot: i, Reason: "weight is NaN"}
		case math.IsInf(w, 0):
			return nil, &CurveError{Name: name, Slot: i, Reason: fmt.Sprintf("weight is %v", w)}
		case w < 0:
			return nil, &CurveError{Name: name, Slot: i, Reason: fmt.Sprintf("weight %v is negative", w)}
		}
		maxW = max(maxW, w)
	}
	if maxW == 0 {
		return nil, &CurveError{Name: name, Slot: -1, Reason: "weights sum to 0; at least one must be positive"}
	}
	scaled := make([]float64, len(weights))
	var sum float64
	for i, w := range weights {
		scaled[i] = w / maxW
		sum += scaled[i]
	}
	normalised := make([]float64, len(weights))
	for i, s := range scaled {
		normalised[i] = s / sum
	}

	shares := largestRemainder(normalised)
	cumulative := make([]int64, len(shares)+1)
	for i, s := range shares {
		cumulative[i+1] = cumulative[i] + s
	}
	return &Curve{name: name, weights: normalised, cumulative: cumulative}, nil
}

// ValidCurveName reports whether name can name a curve: 1 to 64 bytes of
// [a-z0-9_-]. It is the one rule for curve names: NewCurve's, the ledger's
// for a campaign's curve, and pacerctl's.
func ValidCurveName(name string) bool { return checkCurveName(name) == nil }

func checkCurveName(name string) error {
	if name == "" {
		return &CurveError{Name: name, Slot: -1, Reason: "empty name"}
	}
	if len(name) > maxCurveName {
		return &CurveError{Name: name, Slot: -1,
			Reason: fmt.Sprintf("name is %d bytes; at most %d allowed", len(name), maxCurveName)}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') || c == '_' || c == '-' {
			continue
		}
		return &CurveError{Name: name, Slot: -1,
			Reason: fmt.Sprintf("name byte %d is %q; only a-z, 0-9, '_' and '-' allowed", i, c)}
	}
	return nil
}

// largestRemainder turns fractions summing to about 1 into integer PPB
// shares summing to exactly PPB. Floats only choose the rounding; the
// integer correction afterwards is what makes the total exact, whatever
// rounding error the fractions carry.
func largestRemainder(fractions []float64) []int64 {
	n := len(fractions)
	shares := make([]int64, n)
	rems := make([]float64, n)
	var total int64
	for i, f := range fractions {
		q := f * float64(PPB)
		fl := math.Floor(q)
		shares[i] = int64(fl)
		rems[i] = q - fl
		total += shares[i]
	}
	// Slots that may take a correction, largest remainder first, earlier
	// slot on ties. Zero-weight slots never take one, so a curve that says
	// "nothing at night" releases exactly nothing at night.
	order := make([]int, 0, n)
	for i, f := range fractions {
		if f > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rems[a] > rems[b]:
			return -1
		case rems[a] < rems[b]:
			return 1
		}
		return a - b
	})
	// In exact arithmetic the deficit is below len(order); float rounding
	// can only move it by a few units either way, hence the loops.
	for i := 0; total < PPB; i = (i + 1) % len(order) {
		shares[order[i]]++
		total++
	}
	for i := len(order) - 1; total > PPB; i-- {
		if i < 0 {
			i = len(order) - 1
		}
		if shares[order[i]] > 0 {
			shares[order[i]]--
			total--
		}
	}
	return shares
}

// Flat returns the built-in curve named "flat": equal weights over slots
// slots, which releases budget at a constant rate through the local day.
// Flat(24) is the default curve of a campaign that names none.
//
// Flat panics if slots is not 24, 48, 96 or 1440: the slot count is a
// constant in the caller, not input.
func Flat(slots int) *Curve {
	if !validSlots(slots) {
		panic(fmt.Sprintf("bucket: Flat(%d): slots must be 24, 48, 96 or 1440", slots))
	}
	w := make([]float64, slots)
	for i := range w {
		w[i] = 1
	}
	c, err := NewCurve("flat", w)
	if err != nil {
		panic(err) // unreachable: the input is valid by construction
	}
	return c
}

// Name returns the curve's name.
func (c *Curve) Name() string { return c.name }

// Slots returns the number of equal slots the curve divides a day into.
func (c *Curve) Slots() int { return len(c.cumulative) - 1 }

// Weights returns a copy of the weights, normalised to sum to 1 (within
// float rounding). They are for display; the arithmetic uses Cumulative.
func (c *Curve) Weights() []float64 { return slices.Clone(c.weights) }

// Cumulative returns a copy of the cumulative table in PPB: Slots()+1
// entries, non-decreasing, from 0 at the day's start to PPB at its end.
func (c *Curve) Cumulative() []int64 { return slices.Clone(c.cumulative) }

// At returns the cumulative share, in PPB, of the day's budget the curve
// has released elapsed into a day dayLength long.
//
// Slots are equal fractions of dayLength, not fixed hours, so on a 23- or
// 25-hour local day (DST) the curve shrinks or stretches with the day and
// still ends at exactly PPB at the next midnight. Within a slot the result
// is interpolated linearly, in integer arithmetic rounded down, so it is
// non-decreasing in elapsed. elapsed <= 0 gives 0, elapsed >= dayLength
// gives PPB; both are exact.
//
// The products are taken in 128 bits, so any positive dayLength works at
// nanosecond resolution without overflow.
func (c *Curve) At(elapsed, dayLength time.Duration) int64 {
	if elapsed <= 0 {
		return 0
	}
	if elapsed >= dayLength {
		return PPB
	}
	n := uint64(c.Slots())
	day := uint64(dayLength)
	// slot = floor(elapsed*n/day), and into/day is the fraction of that
	// slot already past. elapsed < day keeps hi < day, so Div64 cannot
	// panic.
	hi, lo := bits.Mul64(uint64(elapsed), n)
	slot, into := bits.Div64(hi, lo, day)
	share := c.cumulative[slot+1] - c.cumulative[slot]
	// share*into/day < share: the quotient always fits.
	hi, lo = bits.Mul64(uint64(share), into)
	part, _ := bits.Div64(hi, lo, day)
	return c.cumulative[slot] + int64(part)
}

// AtTime returns At(t - d.Start, d.Length()): the share of d's budget the
// curve has released by instant t.
func (c *Curve) AtTime(t time.Time, d Day) int64 {
	return c.At(t.Sub(d.Start), d.Length())
}

// Day is one local calendar day of a campaign: the unit a daily budget is
// for. Start and End are consecutive local midnights, so Length is 23, 24
// or 25 hours around DST changes.
type Day struct {
	Key        string // local date, "2006-01-02"
	Start, End time.Time
}

// dayKeyLayout is the form of Day.Key, which also names the campaign-day in
// ledger keys and reports.
const dayKeyLayout = "2006-01-02"

// DayOf returns the local day of loc that contains t. It panics if loc is
// nil, as time.Time.In does: a campaign's zone must be chosen, never assumed.
func DayOf(t time.Time, loc *time.Location) Day {
	y, m, d := t.In(loc).Date()
	return dayFromDate(y, m, d, loc)
}

// dayFromDate lets time.Date normalise d+1 across month ends and DST: it
// resolves the wall clock midnight in loc, which is what a local day is.
func dayFromDate(y int, m time.Month, d int, loc *time.Location) Day {
	return Day{
		// Formatted from the date, not from Start: where DST skips
		// midnight itself, Start may fall on the previous date's clock.
		Key:   fmt.Sprintf("%04d-%02d-%02d", y, int(m), d),
		Start: time.Date(y, m, d, 0, 0, 0, 0, loc),
		End:   time.Date(y, m, d+1, 0, 0, 0, 0, loc),
	}
}

// ParseDayKey returns the local day of loc named by key ("2026-03-08").
func ParseDayKey(key string, loc *time.Location) (Day, error) {
	if loc == nil {
		return Day{}, fmt.Errorf("bucket: day key %q: nil location", key)
	}
	// Parsed as a date only; the zone enters when the midnights are built.
	t, err := time.Parse(dayKeyLayout, key)
	if err != nil {
		return Day{}, fmt.Errorf("bucket: day key %q: want YYYY-MM-DD: %w", key, err)
	}
	y, m, d := t.Date()
	day := dayFromDate(y, m, d, loc)
	if day.Key != key {
		return Day{}, fmt.Errorf("bucket: day key %q: want YYYY-MM-DD", key)
	}
	return day, nil
}

// Length returns how long the day is: 24 hours, or 23 or 25 around DST.
func (d Day) Length() time.Duration { return d.End.Sub(d.Start) }
