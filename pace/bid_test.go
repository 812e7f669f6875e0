package pace

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Condition 20 over random inputs: a bid below the fleet's is reported only
// as the largest of enough SPENDs over enough windows; none before
// ReportBidWindows; one at or above the fleet's always after.
func TestReportsBidProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 20))
	for range 200_000 {
		seen, fleet := r.Int64N(10_000), r.Int64N(10_000)*int64(r.IntN(2))
		windows, spends := r.IntN(12), r.IntN(40)
		spends = max(spends, windows) // a window that had any had one at least
		got := ReportsBid(seen, fleet, windows, spends)
		switch {
		case seen <= 0 || windows < ReportBidWindows:
			if got {
				t.Fatalf("ReportsBid(%d, %d, %d windows, %d SPENDs): reported before %d windows", seen, fleet, windows, spends, ReportBidWindows)
			}
		case fleet <= 0:
			if !got {
				t.Fatalf("ReportsBid(%d, %d, %d windows, %d SPENDs): the first bid not reported", seen, fleet, windows, spends)
			}
		case seen < fleet:
			if want := windows >= LowerBidWindows && spends >= BidSpends; got != want {
				t.Fatalf("ReportsBid(%d, %d, %d windows, %d SPENDs) = %v below the fleet's; want %v", seen, fleet, windows, spends, got, want)
			}
		default:
			if want := spends >= BidSpends; got != want {
				t.Fatalf("ReportsBid(%d, %d, %d windows, %d SPENDs) = %v at or above the fleet's; want %v", seen, fleet, windows, spends, got, want)
			}
		}
	}
}

// What condition 20 is for: 2,000 random days of one host reporting its
// bid (the largest SPEND of its last eight windows that had any) over the
// fleet's, which starts at the bids' 95th percentile, under bid spreads
// (lognormal, σ 0.2 to 1) and rates (0.2 to 20 SPENDs a window) drawn at
// random. The fleet's bid, as the host's reports set it, is below the
// spread's 80th percentile in at most 1% of the windows after the host's
// first report; and, for hosts with at most two SPENDs a window, above its
// 99.5th percentile in at most 5%. Moved by any host after four windows
// up and eight down whatever their SPENDs (the rule before), 2.75% and
// 6.0%; lowered only as the largest of 19 SPENDs but raised by any after
// four windows, 0.14% and 28%: an outlying SPEND raised it for the day.
func TestFleetBidStaysNearItsUsualLargest(t *testing.T) {
	got := fleetBidDays(ReportsBid)
	t.Logf("below the 80th percentile in %.2f%% of windows; a sparse host's above the 99.5th in %.2f%%", 100*got.below, 100*got.sparseAbove)
	if got.below > 0.01 {
		t.Errorf("the fleet's bid below the spread's 80th percentile in %.2f%% of windows; want at most 1%%", 100*got.below)
	}
	if got.sparseAbove > 0.05 {
		t.Errorf("the fleet's bid, reported by hosts with at most two SPENDs a window, above the spread's 99.5th percentile in %.2f%% of windows; want at most 5%%", 100*got.sparseAbove)
	}
}

// fleetBid is how often random days of reports by rule left the fleet's
// bid far from the bids' spread: below its 80th percentile (of all
// windows), and above its 99.5th (of those of hosts with at most two
// SPENDs a window).
type fleetBid struct{ below, sparseAbove float64 }

func fleetBidDays(rule func(seen, fleet int64, windows, spends int) bool) fleetBid {
	r := rand.New(rand.NewPCG(7, 95))
	const days, windowsADay = 2_000, 288
	var below, above, judged, sparseJudged int
	for range days {
		sigma := 0.2 + 0.8*r.Float64()
		rate := 0.2 * math.Pow(100, r.Float64()) // SPENDs a window
		mu := math.Log(2000) - sigma*sigma/2     // a mean bid of 2,000
		quantile := func(z float64) int64 { return int64(math.Exp(mu + z*sigma)) }
		p80, p995 := quantile(0.8416), quantile(2.5758)
		fleet := quantile(1.6449)
		var largest, counts [LowerBidWindows]int64
		next := 0
		for range windowsADay {
			n := poisson(r, rate)
			if n == 0 {
				continue
			}
			var top int64
			for range n {
				top = max(top, int64(math.Exp(mu+sigma*r.NormFloat64())))
			}
			largest[next], counts[next] = top, int64(n)
			next = (next + 1) % LowerBidWindows
			windows, spends, seen := 0, 0, int64(0)
			for i := range largest {
				if largest[i] > 0 {
					windows++
					spends += int(counts[i])
					seen = max(seen, largest[i])
				}
			}
			if windows < ReportBidWindows {
				continue
			}
			if rule(seen, fleet, windows, spends) {
				fleet = seen
			}
			judged++
			if fleet < p80 {
				below++
			}
			if rate <= 2 {
				sparseJudged++
				if fleet > p995 {
					above++
				}
			}
		}
	}
	return fleetBid{below: float64(below) / float64(judged), sparseAbove: float64(above) / float64(sparseJudged)}
}

// poisson draws a Poisson count of mean m (Knuth's; m is small here).
func poisson(r *rand.Rand, m float64) int {
	l, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
