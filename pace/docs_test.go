package pace

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
)

// docs/PACING.md quotes the controller's constants in prose: each quote
// must carry the code's value.
func TestPacingDocQuotesTheController(t *testing.T) {
	data, err := os.ReadFile("../docs/PACING.md")
	if err != nil {
		t.Fatal(err)
	}
	words := map[string]int{"two": 2, "twice": 2, "three": 3, "four": 4, "five": 5, "eight": 8}
	for _, c := range []struct {
		phrase *regexp.Regexp
		want   float64
	}{
		{regexp.MustCompile(`before it\) catches up at ([0-9.]+)x`), float64(LastHourCatchUpPermille) / 1000},
		{regexp.MustCompile(`\(at most ([0-9.]+)\), ` + "`n`"), MaxHeadroom},
		{regexp.MustCompile(`behind by (\w+) windows of pace`), CatchingWindows},
		{regexp.MustCompile(`average hour is at most (\w+)\s+bids`), HourBoundBids},
		{regexp.MustCompile(`hour at (\w+) the curve's share of it`), HourPermille / 1000},
		{regexp.MustCompile(`less of ([0-9.]+)x its share and a`), float64(LastHourPermille) / 1000},
		{regexp.MustCompile(`bid and ([0-9.]+)x and no bid, so`), float64(LastHourExactPermille) / 1000},
		{regexp.MustCompile(`its last (\w+) SPENDs came`), StandingSpends},
		{regexp.MustCompile(`or (\w+) of their\s+intervals`), StandingIdleIntervals},
		{regexp.MustCompile(`one to (\w+), and at most 1%`), MaxStandingBids},
		{regexp.MustCompile(`holds at most (\w+) bids or a lease`), MeterBids},
		{regexp.MustCompile("`n/\\(n \\+ (\\w+)\\)` of the way"), ShareSpanSpends},
		{regexp.MustCompile(`asks at\s+least ([0-9.]+)x its share`), ShareThrottleDemand},
		{regexp.MustCompile(`fleet's once it has seen\s+SPENDs in (\w+) windows while`), ReportBidWindows},
		{regexp.MustCompile(`largest of at least (\w+) SPENDs, over`), BidSpends},
		{regexp.MustCompile(`SPENDs, over (\w+)\s+windows up`), ReportBidWindows},
		{regexp.MustCompile(`windows up and (\w+) down`), LowerBidWindows},
		{regexp.MustCompile("`(\\w+) × M × \\(1 − [0-9.]+/√n\\)`"), AdvanceBids},
		{regexp.MustCompile("`\\w+ × M × \\(1 − ([0-9.]+)/√n\\)`"), advanceStdErrors},
		{regexp.MustCompile(`taken over\), at least ([0-9.]+) of them`), MinAdvanceMeans},
		{regexp.MustCompile(`as ([0-9]+)\s+SPENDs would \(` + "`pace.MeanSpend`"), MeanPriorSpends},
		{regexp.MustCompile("`bucket.MaxFeeds`, (\\w+) leases"), bucket.MaxFeeds},
	} {
		m := c.phrase.FindAllSubmatch(data, -1)
		if len(m) == 0 {
			t.Errorf("docs/PACING.md no longer says %q: update this test if the text moved", c.phrase)
		}
		for _, m := range m {
			got, err := strconv.ParseFloat(string(m[1]), 64)
			if n, ok := words[string(m[1])]; ok {
				got, err = float64(n), nil
			}
			if err != nil || got != c.want {
				t.Errorf("docs/PACING.md: %q, but the code says %v", m[0], c.want)
			}
		}
	}
}

// docs/PACING.md quotes the headroom's formula and the least gap between
// grants: Headroom and MinGrantGap must be what it says.
func TestPacingDocQuotesTheHeadroomAndGap(t *testing.T) {
	data, err := os.ReadFile("../docs/PACING.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("is `([0-9.]+) \\+ ([0-9.]+)/√n` \\(at most ([0-9.]+)\\), `n` the\\s+SPENDs expected per half\\s+window").FindSubmatch(data)
	if m == nil {
		t.Fatal("docs/PACING.md no longer gives the headroom as `a + b/√n` (at most c): update this test if the text moved")
	}
	a, _ := strconv.ParseFloat(string(m[1]), 64)
	b, _ := strconv.ParseFloat(string(m[2]), 64)
	c, _ := strconv.ParseFloat(string(m[3]), 64)
	const window = 30 * time.Second
	for _, n := range []float64{1, 4, 16, 100, 10_000} { // SPENDs per half window
		calls := n / (window.Seconds() / 2)
		if got, want := Headroom(calls, window), min(a+b/math.Sqrt(n), c); math.Abs(got-want) > 1e-9 {
			t.Errorf("Headroom at %v SPENDs a half window = %v; docs/PACING.md says %v + %v/√n, at most %v: %v", n, got, a, b, c, want)
		}
	}
	if !regexp.MustCompile(`At most one grant a second`).Match(data) || MinGrantGap != time.Second {
		t.Errorf("docs/PACING.md says \"At most one grant a second\"; MinGrantGap is %v", MinGrantGap)
	}
}
