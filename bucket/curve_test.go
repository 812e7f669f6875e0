package bucket

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // DST tests must not depend on the host's zoneinfo
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// peaked is nothing overnight, a morning ramp, an afternoon peak and a
// busy evening: weights 0, 1, 3, 2 for six hours each. Its shares exercise
// the largest-remainder rounding: 1/36, 3/36 and 2/36 of PPB have
// remainders .78, .33 and .56, and 10 PPB are left to hand out.
func peaked(t testing.TB) *Curve {
	t.Helper()
	w := make([]float64, 24)
	for i := range w {
		w[i] = []float64{0, 1, 3, 2}[i/6]
	}
	c, err := NewCurve("peaked", w)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCurveShares(t *testing.T) {
	c := peaked(t)
	var shares []int64
	cum := c.Cumulative()
	for i := range c.Slots() {
		shares = append(shares, cum[i+1]-cum[i])
	}
	want := []int64{
		0, 0, 0, 0, 0, 0,
		27777778, 27777778, 27777778, 27777778, 27777778, 27777778, // .78: all six round up
		83333333, 83333333, 83333333, 83333333, 83333333, 83333333, // .33: none does
		55555556, 55555556, 55555556, 55555556, 55555555, 55555555, // .56: the first four
	}
	if !equalInts(shares, want) {
		t.Errorf("shares = %v\nwant     %v", shares, want)
	}
	if got := c.Weights(); math.Abs(got[12]-3.0/36) > 1e-15 || got[0] != 0 {
		t.Errorf("Weights()[0,12] = %v, %v; want 0, 1/12", got[0], got[12])
	}
}

// TestCurveSharesSumToPPB checks the exact total on awkward inputs: wide
// dynamic range, many tiny weights, one dominant slot, huge magnitudes.
func TestCurveSharesSumToPPB(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func(i int) float64{
		"uniform":   func(int) float64 { return r.Float64() },
		"exp-range": func(int) float64 { return math.Pow(10, r.Float64()*30-15) },
		"one-hot":   func(i int) float64 { return float64(btoi(i == 7)) },
		"huge":      func(int) float64 { return math.MaxFloat64 * r.Float64() },
		"sparse":    func(int) float64 { return float64(btoi(r.IntN(10) == 0)) * r.Float64() },
		"tiny":      func(int) float64 { return math.SmallestNonzeroFloat64 * float64(1+r.IntN(3)) },
	}
	for name, gen := range gens {
		for _, n := range []int{24, 48, 96, 1440} {
			for range 20 {
				w := make([]float64, n)
				for i := range w {
					w[i] = gen(i)
				}
				if i := r.IntN(n); w[i] == 0 {
					w[i] = gen(i) + math.SmallestNonzeroFloat64 // keep the sum positive
				}
				c, err := NewCurve("x", w)
				if err != nil {
					t.Fatalf("%s/%d: %v", name, n, err)
				}
				cum := c.Cumulative()
				if len(cum) != n+1 || cum[0] != 0 || cum[n] != PPB {
					t.Fatalf("%s/%d: cumulative ends %d..%d (len %d)", name, n, cum[0], cum[len(cum)-1], len(cum))
				}
				for i := range n {
					if cum[i+1] < cum[i] {
						t.Fatalf("%s/%d: cumulative decreases at slot %d", name, n, i)
					}
					if w[i] == 0 && cum[i+1] != cum[i] {
						t.Fatalf("%s/%d: zero-weight slot %d got share %d", name, n, i, cum[i+1]-cum[i])
					}
				}
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestNewCurveRejects(t *testing.T) {
	ok := make([]float64, 24)
	for i := range ok {
		ok[i] = 1
	}
	with := func(i int, v float64) []float64 {
		w := append([]float64(nil), ok...)
		w[i] = v
		return w
	}
	tests := []struct {
		name    string
		weights []float64
		slot    int
		msg     string
	}{
		{"", ok, -1, "empty name"},
		{"Peak", ok, -1, `name byte 0 is 'P'`},
		{"peak hours", ok, -1, `name byte 4 is ' '`},
		{strings.Repeat("a", 65), ok, -1, "name is 65 bytes; at most 64"},
		{"short", ok[:23], -1, "23 weights; want 24, 48, 96 or 1440"},
		{"none", nil, -1, "0 weights"},
		{"nan", with(5, math.NaN()), 5, "slot 5: weight is NaN"},
		{"inf", with(6, math.Inf(1)), 6, "slot 6: weight is +Inf"},
		{"neg", with(7, -0.5), 7, "slot 7: weight -0.5 is negative"},
		{"zero", make([]float64, 48), -1, "weights sum to 0"},
	}
	for _, tt := range tests {
		c, err := NewCurve(tt.name, tt.weights)
		var ce *CurveError
		if !errors.As(err, &ce) {
			t.Errorf("NewCurve(%q, len %d) = %v, %v; want *CurveError", tt.name, len(tt.weights), c, err)
			continue
		}
		if ce.Slot != tt.slot || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("NewCurve(%q): slot %d, %q; want slot %d, containing %q", tt.name, ce.Slot, err, tt.slot, tt.msg)
		}
	}
	if _, err := NewCurve(strings.Repeat("a", 64)+"", ok); err != nil {
		t.Errorf("64-byte name: %v", err)
	}
	if _, err := NewCurve("a-z_0-9", ok); err != nil {
		t.Errorf("name with every allowed class: %v", err)
	}
}

func TestFlat(t *testing.T) {
	for _, n := range []int{24, 48, 96, 1440} {
		c := Flat(n)
		if c.Name() != "flat" || c.Slots() != n {
			t.Errorf("Flat(%d) = %q with %d slots", n, c.Name(), c.Slots())
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Flat(25) did not panic")
		}
	}()
	Flat(25)
}

const (
	H = time.Hour
	M = time.Minute
)

func TestCurveAt(t *testing.T) {
	flat, flat1440, peak := Flat(24), Flat(1440), peaked(t)
	steps := []struct {
		c               *Curve
		elapsed, dayLen time.Duration
		want            int64
	}{
		// Clamped, exact ends.
		{flat, -H, 24 * H, 0},
		{flat, 0, 24 * H, 0},
		{flat, 24 * H, 24 * H, PPB},
		{flat, 30 * H, 24 * H, PPB},
		{flat, 0, 0, 0},
		{flat, 1, 0, PPB},
		// Inside the day: edges hit the table, interiors interpolate.
		{flat, 1, 24 * H, 0},
		{flat, 30 * M, 24 * H, 20833333},
		{flat, H, 24 * H, 41666667},
		{flat, 12 * H, 24 * H, 500000004},
		{flat, 18*H + 30*M, 24 * H, 770833337},
		{flat, 24*H - 1, 24 * H, 999999999},
		// DST days: the curve stretches, noon is not 12/24 of the day.
		{flat, 11 * H, 23 * H, 478260873},
		{flat, 13 * H, 25 * H, 520000004},
		// Peaked: nothing overnight, then the ramp.
		{peak, 3 * H, 24 * H, 0},
		{peak, 6 * H, 24 * H, 0},
		{peak, 6*H + 30*M, 24 * H, 13888889},
		{peak, 12 * H, 24 * H, 166666668},
		{peak, 15*H + 20*M, 24 * H, 444444444},
		{peak, 11 * H, 23 * H, 152173914},
		{peak, 13 * H, 25 * H, 206666667},
		// 1440 one-minute slots.
		{flat1440, M, 24 * H, 694445},
		{flat1440, 90 * time.Second, 24 * H, 1041667},
		{flat1440, 12 * H, 24 * H, 500000320},
		{flat1440, 12*H + 1, 24 * H, 500000320},
		{flat1440, 11 * H, 23 * H, 478261203},
		{flat1440, 13 * H, 25 * H, 520000307},
	}
	for i, s := range steps {
		if got := s.c.At(s.elapsed, s.dayLen); got != s.want {
			t.Errorf("step %d: %s.At(%v, %v) = %d; want %d", i, s.c.Name(), s.elapsed, s.dayLen, got, s.want)
		}
	}
}

func TestCurveAtTime(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	kol := mustLoad(t, "Asia/Kolkata")
	flat, peak := Flat(24), peaked(t)
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	steps := []struct {
		at     string // RFC 3339
		loc    *time.Location
		key    string
		start  string
		length time.Duration
		flat   int64
		peak   int64
	}{
		// Spring forward: 02:00 EST jumps to 03:00 EDT, a 23-hour day.
		{"2026-03-08T05:00:00Z", ny, "2026-03-08", "2026-03-08T05:00:00Z", 23 * H, 0, 0},
		{"2026-03-08T06:59:59Z", ny, "2026-03-08", "2026-03-08T05:00:00Z", 23 * H, 86944445, 0},
		{"2026-03-08T16:00:00Z", ny, "2026-03-08", "2026-03-08T05:00:00Z", 23 * H, 478260873, 152173914}, // local noon
		{"2026-03-09T03:59:59Z", ny, "2026-03-08", "2026-03-08T05:00:00Z", 23 * H, 999987922, 999983896},
		{"2026-03-09T04:00:00Z", ny, "2026-03-09", "2026-03-09T04:00:00Z", 24 * H, 0, 0},
		// Fall back: 02:00 EDT repeats 01:00 EST, a 25-hour day.
		{"2026-11-01T17:00:00Z", ny, "2026-11-01", "2026-11-01T04:00:00Z", 25 * H, 520000004, 206666667}, // local noon
		{"2026-11-02T04:59:59Z", ny, "2026-11-01", "2026-11-01T04:00:00Z", 25 * H, 999988888, 999985185},
		// An ordinary New York day.
		{"2026-07-01T16:00:00Z", ny, "2026-07-01", "2026-07-01T04:00:00Z", 24 * H, 500000004, 166666668},
		// Kolkata is UTC+05:30: its day starts at 18:30 UTC the day before.
		{"2026-03-08T18:29:59Z", kol, "2026-03-08", "2026-03-07T18:30:00Z", 24 * H, 999988425, 999984567},
		{"2026-03-08T18:30:00Z", kol, "2026-03-09", "2026-03-08T18:30:00Z", 24 * H, 0, 0},
		{"2026-03-09T06:30:00Z", kol, "2026-03-09", "2026-03-08T18:30:00Z", 24 * H, 500000004, 166666668}, // local noon
	}
	for i, s := range steps {
		at := utc(s.at)
		d := DayOf(at, s.loc)
		if d.Key != s.key || !d.Start.Equal(utc(s.start)) || d.Length() != s.length {
			t.Errorf("step %d: DayOf(%s, %s) = %s from %v, %v long; want %s from %s, %v long",
				i, s.at, s.loc, d.Key, d.Start.UTC(), d.Length(), s.key, s.start, s.length)
			continue
		}
		if got := flat.AtTime(at, d); got != s.flat {
			t.Errorf("step %d: flat.AtTime(%s, %s) = %d; want %d", i, s.at, d.Key, got, s.flat)
		}
		if got := peak.AtTime(at, d); got != s.peak {
			t.Errorf("step %d: peaked.AtTime(%s, %s) = %d; want %d", i, s.at, d.Key, got, s.peak)
		}
		if p, err := ParseDayKey(d.Key, s.loc); err != nil || p != d {
			t.Errorf("step %d: ParseDayKey(%s) = %+v, %v; want %+v", i, d.Key, p, err, d)
		}
	}
}

func TestParseDayKeyRejects(t *testing.T) {
	for _, key := range []string{"", "2026-3-8", "2026-02-30", "2026-03-08T00:00", "26-03-08", "2026/03/08"} {
		if d, err := ParseDayKey(key, time.UTC); err == nil {
			t.Errorf("ParseDayKey(%q) = %+v; want error", key, d)
		}
	}
	if _, err := ParseDayKey("2026-03-08", nil); err == nil {
		t.Error("ParseDayKey with nil location: want error")
	}
}

// TestCurveAtExact compares At with exact big-integer arithmetic, over day
// lengths far beyond 48 hours, and checks it never decreases.
func TestCurveAtExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	curves := []*Curve{Flat(24), Flat(1440), peaked(t)}
	w := make([]float64, 1440)
	for i := range w {
		w[i] = r.Float64() * float64(btoi(r.IntN(4) > 0))
	}
	if c, err := NewCurve("random", w); err == nil {
		curves = append(curves, c)
	} else {
		t.Fatal(err)
	}
	for _, c := range curves {
		cum := c.Cumulative()
		n := int64(c.Slots())
		for range 2000 {
			var day time.Duration
			switch r.IntN(3) {
			case 0:
				day = time.Duration(23+r.IntN(3)) * H
			case 1:
				day = time.Duration(1 + r.Int64N(int64(48*H)))
			default:
				day = time.Duration(1 + r.Int64N(math.MaxInt64-1))
			}
			e := time.Duration(r.Int64N(int64(day)))
			// Exact: cum[i] + share*(e*n - i*day)/day, i = e*n/day.
			en := new(big.Int).Mul(big.NewInt(int64(e)), big.NewInt(n))
			i, into := new(big.Int).QuoRem(en, big.NewInt(int64(day)), new(big.Int))
			s := i.Int64()
			part := new(big.Int).Mul(big.NewInt(cum[s+1]-cum[s]), into)
			part.Quo(part, big.NewInt(int64(day)))
			want := cum[s] + part.Int64()
			got := c.At(e, day)
			if got != want {
				t.Fatalf("%s.At(%d, %d) = %d; want %d", c.Name(), e, day, got, want)
			}
			if e+1 < day {
				if next := c.At(e+1, day); next < got {
					t.Fatalf("%s.At decreases: At(%d) = %d, At(%d) = %d (day %d)", c.Name(), e, got, e+1, next, day)
				}
			}
		}
		// Walk a DST day slot edge by slot edge, and around each edge.
		var prev int64
		for _, day := range []time.Duration{23 * H, 25 * H} {
			prev = 0
			for e := time.Duration(0); e <= day; e += time.Minute {
				for _, d := range []time.Duration{-1, 0, 1} {
					if v := c.At(e+d, day); v < prev && e+d >= 0 {
						t.Fatalf("%s.At(%v) = %d < %d", c.Name(), e+d, v, prev)
					} else if e+d >= 0 {
						prev = v
					}
				}
			}
			if prev != PPB {
				t.Fatalf("%s.At(end of %v day) = %d", c.Name(), day, prev)
			}
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ValidCurveName is NewCurve's rule, the one the ledger and pacerctl check
// campaigns' curves by.
func TestValidCurveName(t *testing.T) {
	for name, want := range map[string]bool{
		"flat": true, "evening-peak_2": true, strings.Repeat("a", 64): true,
		"": false, strings.Repeat("a", 65): false, "Bad": false, "a.b": false, "a/b": false, "é": false,
	} {
		if got := ValidCurveName(name); got != want {
			t.Errorf("ValidCurveName(%q) = %v, want %v", name, got, want)
		}
		if _, err := NewCurve(name, make24()); (err == nil) != want {
			t.Errorf("NewCurve(%q): %v, want valid %v", name, err, want)
		}
	}
}

func make24() []float64 {
	w := make([]float64, 24)
	for i := range w {
		w[i] = 1
	}
	return w
}
