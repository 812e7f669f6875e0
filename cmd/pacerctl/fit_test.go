package main

import (
	"context"
	"fmt"
	"image"
	_ "image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
)

// curveShares returns a curve's shares as fractions of the day.
func curveShares(c *bucket.Curve) []float64 {
	out := make([]float64, c.Slots())
	for i, s := range shares(c) {
		out[i] = float64(s) / float64(bucket.PPB)
	}
	return out
}

func writeCSV(t *testing.T, name, header string, rows func(i int) float64, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# observed demand\n" + header + "\n")
	for i := range n {
		fmt.Fprintf(&b, "%d,%g\n", i, rows(i))
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fitFromCSV runs curve fit --from-csv and parses the curve it prints.
func fitFromCSV(t *testing.T, path string, flags ...string) (*bucket.Curve, result) {
	t.Helper()
	r := runArgs(append([]string{"curve", "fit", "--from-csv", path}, flags...)...)
	if r.code != 0 {
		t.Fatalf("curve fit %s: %+v", path, r)
	}
	c, err := config.ParseCurve([]byte(r.stdout))
	if err != nil {
		t.Fatalf("curve fit printed a bad curve: %v\n%s", err, r.stdout)
	}
	return c, r
}

func TestCurveFitStepTable(t *testing.T) {
	// Night 00-06 has no demand at all, day 06-18 three times the evening.
	step := func(h int) float64 {
		switch {
		case h < 6:
			return 0
		case h < 18:
			return 300
		}
		return 100
	}
	csv := writeCSV(t, "Step Day.csv", "hour,requests", func(i int) float64 { return step(i) }, 24)
	floor := 0.2 / 24
	for _, tc := range []struct {
		name  string
		flags []string
		// want is the share of hour h; edge hours are blurred by smoothing.
		want func(h int) float64
		tol  float64
	}{
		// No smoothing: the night gets the floor; day and evening share
		// the rest 3:1. 12*3x + 6*x = 1 - 6*floor.
		{"exact", []string{"--smooth", "0"}, func(h int) float64 {
			x := (1 - 6*floor) / 42
			switch {
			case h < 6:
				return floor
			case h < 18:
				return 3 * x
			}
			return x
		}, 1e-8},
		// Default smoothing (one hour each side): the plateaus' insides keep
		// their level within a few percent.
		{"smoothed", nil, func(h int) float64 {
			x := (1 - 6*floor) / 42
			switch {
			case h > 0 && h < 5:
				return floor
			case h > 6 && h < 17:
				return 3 * x
			case h > 18 && h < 23:
				return x
			}
			return -1 // an edge: not checked
		}, 0.03},
	} {
		c, r := fitFromCSV(t, csv, tc.flags...)
		if c.Name() != "step-day-fit" || c.Slots() != 24 {
			t.Errorf("%s: curve %s with %d slots", tc.name, c.Name(), c.Slots())
		}
		if !strings.Contains(r.stderr, "curve step-day-fit: 24 slots fitted to 24 slots of demand from "+csv) {
			t.Errorf("%s: summary %q", tc.name, r.stderr)
		}
		got := curveShares(c)
		for h, g := range got {
			w := tc.want(h)
			if w >= 0 && math.Abs(g-w) > tc.tol*w+1e-9 {
				t.Errorf("%s: hour %d: share %.6f, want %.6f", tc.name, h, g, w)
			}
			if g < floor-1e-9 || g > 5.0/24+1e-9 {
				t.Errorf("%s: hour %d: share %.6f outside the bounds", tc.name, h, g)
			}
		}
	}

	// 96 slots resampled to 24 hours, and to 96 slots.
	csv96 := writeCSV(t, "q.csv", "slot,requests", func(i int) float64 { return step(i / 4) }, 96)
	c24, _ := fitFromCSV(t, csv96, "--smooth", "0", "--name", "quarters")
	exact, _ := fitFromCSV(t, csv, "--smooth", "0")
	for h, s := range shares(c24) {
		if d := s - shares(exact)[h]; d < -2 || d > 2 {
			t.Errorf("96 slots to 24: hour %d share %d, want %d", h, s, shares(exact)[h])
		}
	}
	c96, _ := fitFromCSV(t, csv96, "--slots", "96", "--smooth", "0")
	if c96.Slots() != 96 || math.Abs(curveShares(c96)[0]-floor/4) > 1e-8 {
		t.Errorf("96 slots: %d, first share %v", c96.Slots(), curveShares(c96)[0])
	}
}

func TestFitBounds(t *testing.T) {
	// One slot holds nearly all the demand, one has none.
	demand := make([]float64, 96)
	for i := range demand {
		demand[i] = 1
	}
	demand[40], demand[3] = 1e9, 0
	c, w, err := fitCurve("spike", demand, fitOptions{Slots: 96, Smooth: 0, Min: 0.2, Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	mean := 1.0 / 96
	got := curveShares(c)
	if math.Abs(got[40]-5*mean) > 1e-8 || math.Abs(got[3]-0.2*mean) > 1e-8 {
		t.Errorf("spike %v (want %v), empty slot %v (want %v)", got[40], 5*mean, got[3], 0.2*mean)
	}
	var sum float64
	for i, v := range w {
		sum += v
		if v < 0.2*mean-1e-12 || v > 5*mean+1e-12 {
			t.Errorf("slot %d: share %v outside the bounds", i, v)
		}
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("shares sum to %v", sum)
	}

	// Nearly everything empty: the few busy slots get the ceiling, the
	// empty ones share the rest, above the floor.
	demand = make([]float64, 24)
	demand[20] = 5
	c, _, err = fitCurve("one", demand, fitOptions{Slots: 24, Smooth: 0, Min: 0.2, Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	got = curveShares(c)
	if rest := (1 - 5.0/24) / 23; math.Abs(got[20]-5.0/24) > 1e-8 || math.Abs(got[0]-rest) > 1e-8 {
		t.Errorf("one busy slot: %v", got)
	}

	if _, _, err := fitCurve("none", make([]float64, 24), fitOptions{Slots: 24, Min: 0.2, Max: 5}); err == nil ||
		!strings.Contains(err.Error(), "no demand observed") {
		t.Errorf("zero demand: %v", err)
	}
	// --min 1 is flat whatever the demand.
	c, _, _ = fitCurve("flat-ish", []float64{0: 9, 23: 1}[:24:24], fitOptions{Slots: 24, Smooth: 1, Min: 1, Max: 5})
	for i, s := range curveShares(c) {
		if math.Abs(s-1.0/24) > 1e-8 {
			t.Errorf("--min 1: slot %d share %v", i, s)
		}
	}
}

func TestCurveFitCSVErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"hour,requests\n0,1\n1,2\n", "2 rows; want 24, 48, 96 or 1440"},
		{"minute,requests\n0,1\n", `header "minute,requests": want slot,requests or hour,requests`},
		{"slot,requests\n" + strings.Repeat("0,1\n", 24), "row 2: slot 0 given twice"},
		{"slot,requests\n" + strings.Repeat("1,-1\n", 24), `row 1: requests "-1": want a finite number >= 0`},
		{"hour,requests\n" + rows(48), "48 rows of hours; want 24"},
		{"slot,requests\n" + rows(24) + "", ""},
	} {
		p := filepath.Join(dir, "d.csv")
		os.WriteFile(p, []byte(tc.body), 0o644)
		r := runArgs("curve", "fit", "--from-csv", p)
		if tc.want == "" {
			if r.code != 0 {
				t.Errorf("%q: %+v", tc.body, r)
			}
			continue
		}
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: %+v\nwant %q", tc.body, r, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"curve", "fit"}, "curve fit: want a campaign id or --from-csv FILE"},
		{[]string{"curve", "fit", "c1", "--from-csv", "x.csv"}, "curve fit: want a campaign id or --from-csv FILE, not both"},
		{[]string{"curve", "fit", "c1", "--slots", "25"}, "curve fit: --slots 25: want 24, 48, 96 or 1440"},
		{[]string{"curve", "fit", "c1", "--min", "0"}, "curve fit: --min 0: want 0 < min <= 1"},
		{[]string{"curve", "fit", "c1", "--max", "0.5"}, "curve fit: --max 0.5: want a number >= 1"},
		{[]string{"curve", "fit", "c1", "--name", "Bad"}, `curve fit: --name "Bad": want 1 to 64 characters from [a-z0-9_-]`},
		{[]string{"curve", "fit", "c1", "--days", "0"}, "curve fit: --days 0: want 1 to 366"},
	} {
		r := runArgs(tc.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "pacerctl: "+tc.want+"\n") {
			t.Errorf("%q: %+v\nwant %q", tc.args, r, tc.want)
		}
	}
}

func rows(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d,%d\n", i, i+1)
	}
	return b.String()
}

func TestCurveFitFromRedis(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.ok("campaign", "set", "c1", "--daily", "10units")
	h.ok("campaign", "set", "c2", "--daily", "10units")
	// Two of the last seven days have data (t0 is 2099-03-08 in UTC), and
	// today's partial day is not used: mornings 10 requests a slot, the
	// rest 30.
	rdb := h.redis.Client()
	for _, day := range []string{"2099-03-07", "2099-03-04", "2099-03-08"} {
		f := map[string]any{}
		for s := range lease.DemandSlots {
			n := 10
			if s >= 48 || day == "2099-03-08" {
				n = 30
			}
			f[fmt.Sprintf("req:%d", s)] = n
			f[fmt.Sprintf("ok:%d", s)] = n - 1
			f[fmt.Sprintf("no:%d", s)] = 1
			f[fmt.Sprintf("reqm:%d", s)] = n * 1000
		}
		if err := rdb.HSet(ctx, lease.DemandKey("c1", day), f).Err(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "c1-fit.yaml")
	stdout := h.ok("curve", "fit", "c1", "--smooth", "0", "--out", out)
	if want := "curve c1-fit: 24 slots fitted to 3840 SPEND requests of campaign c1 on 2 of the last 7 days (2099-03-04..2099-03-07), 95.0% allowed;"; !strings.HasPrefix(stdout, want) ||
		!strings.HasSuffix(stdout, "wrote "+out+"\n") {
		t.Errorf("curve fit c1: %q\nwant prefix %q", stdout, want)
	}
	curves, err := config.LoadCurves(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	c := curves["c1-fit"]
	for hr, s := range curveShares(c) {
		want := 0.5 / 24 // 10 of a mean 20
		if hr >= 12 {
			want = 1.5 / 24
		}
		if math.Abs(s-want) > 1e-8 {
			t.Errorf("hour %d: share %v, want %v", hr, s, want)
		}
	}
	// The fitted file is a curve the other commands use.
	if r := runArgs("--curves", dir, "curve", "show", "c1-fit"); r.code != 0 || !strings.Contains(r.stdout, "curve c1-fit: 24 slots") {
		t.Errorf("curve show c1-fit: %+v", r)
	}
	// --days 2 sees only 2099-03-07.
	if r := h.run("curve", "fit", "c1", "--days", "2", "--name", "recent"); r.code != 0 ||
		!strings.Contains(r.stderr, "on 1 of the last 2 days (2099-03-07)") || !strings.HasPrefix(r.stdout, "name: recent\n") {
		t.Errorf("--days 2: %+v", r)
	}
	if r := h.run("curve", "fit", "c2"); r.code != 1 ||
		!strings.Contains(r.stderr, "no demand recorded for campaign c2 in the last 7 complete days (pacer:demand:c2:<day>, days in UTC): "+
			"a curve is fitted from whole local days before today, so a campaign started today has none yet") {
		t.Errorf("no demand: %+v", r)
	}
	rdb.HSet(ctx, lease.DemandKey("c2", "2099-03-07"), "req:96", 1)
	if r := h.run("curve", "fit", "c2"); r.code != 1 || !strings.Contains(r.stderr, `field "req:96"`) {
		t.Errorf("bad slot: %+v", r)
	}
}

func TestCurveShowPNG(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		curve string
		size  []string
		w, h  int
	}{
		{"evening-peak", nil, 1000, 500},
		{"flat", []string{"--size", "640x480"}, 640, 480},
	} {
		p := filepath.Join(dir, tc.curve+".png")
		args := append([]string{"--curves", "../../configs/curves", "curve", "show", tc.curve, "--png", p}, tc.size...)
		r := runArgs(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "▁") && tc.curve != "flat" || !strings.HasSuffix(r.stdout, fmt.Sprintf("drew %s (%dx%d)\n", p, tc.w, tc.h)) {
			t.Errorf("curve show %s --png: %+v", tc.curve, r)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, format, err := image.DecodeConfig(f)
		f.Close()
		if err != nil || format != "png" || cfg.Width != tc.w || cfg.Height != tc.h {
			t.Errorf("%s: %s %dx%d, %v; want png %dx%d", p, format, cfg.Width, cfg.Height, err, tc.w, tc.h)
		}
	}
	// A 1440-slot curve draws too.
	w := make([]float64, 1440)
	for i := range w {
		w[i] = float64(i%60 + 1)
	}
	c, err := bucket.NewCurve("minutes", w)
	if err != nil {
		t.Fatal(err)
	}
	data, err := curvePNG(c, 300, 200)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _, err := image.DecodeConfig(strings.NewReader(string(data))); err != nil || cfg.Width != 300 || cfg.Height != 200 {
		t.Errorf("1440 slots: %+v %v", cfg, err)
	}
	if r := runArgs("curve", "show", "flat", "--size", "10x10"); r.code != 2 || !strings.Contains(r.stderr, "--size \"10x10\": want WIDTHxHEIGHT") {
		t.Errorf("bad size: %+v", r)
	}
}

func TestPPBOf(t *testing.T) {
	for _, tc := range []struct{ part, whole, want int64 }{
		{0, 10, 0}, {1, 3, 333_333_333}, {10, 10, bucket.PPB},
		{999_999_999_999_999, 1_000_000_000_000_000, 999_999_999}, {-1, 5, 0},
	} {
		if got := ppbOf(tc.part, tc.whole); got != tc.want {
			t.Errorf("ppbOf(%d, %d) = %d, want %d", tc.part, tc.whole, got, tc.want)
		}
	}
}
