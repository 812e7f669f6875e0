package sim

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
)

// docs/PACING.md quotes the simulator's invariants and the ledger's shards
// per bid: each quote must carry the code's value.
func TestPacingDocQuotesTheInvariants(t *testing.T) {
	data, err := os.ReadFile("../docs/PACING.md")
	if err != nil {
		t.Fatal(err)
	}
	words := map[string]string{"two": "2", "twice": "2", "four": "4"}
	for _, c := range []struct {
		phrase *regexp.Regexp
		want   string
	}{
		{regexp.MustCompile(`every 10-second window spends at most ([0-9.]+) ×`), fmt.Sprint(CatchUpSlack)},
		{regexp.MustCompile(`multiple in force \(([0-9.]+) in the last hour\)`), fmt.Sprint(float64(pace.LastHourCatchUpPermille) / 1000)},
		{regexp.MustCompile(`plus (\w+) of the campaign's largest bids \(a bucket's worth\)`), "4"},
		{regexp.MustCompile(`at most 1.1 × ([0-9]+) × the plan`), fmt.Sprint(defaultCatchUp)},
		{regexp.MustCompile(`last hour spends at most ([0-9.]+)x the curve's share`), fmt.Sprint(LastHourBound)},
		{regexp.MustCompile(`at most (\w+) mean bids, or`), fmt.Sprint(AheadBids)},
		{regexp.MustCompile(`mean bids, or ([0-9.]+)% of its budget`), fmt.Sprint(100 * AheadShare)},
		{regexp.MustCompile(`day start at least ([0-9.]+) of the less of`), fmt.Sprint(ColdStartShare)},
		{regexp.MustCompile(`could take at least ([0-9]+) mean bids`), fmt.Sprint(ColdStartBids)},
		{regexp.MustCompile(`over the (\d+) seconds from (\d+) s after a campaign's day start`), fmt.Sprint(CatchUpWindow.Seconds())},
		{regexp.MustCompile(`one shard per ([0-9]+) bids`), fmt.Sprint(lease.BidsPerShard)},
		{regexp.MustCompile(`spend at most ([0-9.]+) of the fleet's catch-up bound`), fmt.Sprint(catchUpMargin)},
	} {
		m := c.phrase.FindAllSubmatch(data, -1)
		if len(m) == 0 {
			t.Errorf("docs/PACING.md no longer says %q: update this test if the text moved", c.phrase)
		}
		for _, m := range m {
			if len(m) < 2 {
				continue
			}
			got := string(m[1])
			if w, ok := words[got]; ok {
				got = w
			}
			if got != c.want {
				t.Errorf("docs/PACING.md: %q, but the code says %s", m[0], c.want)
			}
		}
	}
	sc, err := LoadScenario("../configs/scenarios/midnight-peak.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := sc.Campaigns[0].Expect
	m := regexp.MustCompile(`midnight-peak.yaml\x60 declares ([0-9.]+)%, ([0-9.]+)% and ([0-9.]+) pt`).FindSubmatch(data)
	if m == nil || e == nil || string(m[1]) != fmt.Sprint(100*e.TrackingMax) || string(m[2]) != fmt.Sprint(100*e.Utilisation) || string(m[3]) != fmt.Sprint(100*e.BelowIdeal) {
		t.Errorf("docs/PACING.md: %q; midnight-peak.yaml declares %+v", m, e)
	}
	if CatchUpWindow.Seconds() != 10 || FleetCatchUpWindow.Minutes() != 5 {
		t.Errorf("docs/PACING.md judges one host every 10 seconds and a fleet every 5 minutes; the code, %v and %v", CatchUpWindow, FleetCatchUpWindow)
	}
}

// docs/SIMULATION.md quotes how many pipelines the simulator's client keeps
// in flight (autoPipe): each quote must carry pipeFlushers.
func TestSimulationDocQuotesThePipelines(t *testing.T) {
	data, err := os.ReadFile("../docs/SIMULATION.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`on one of up to (\d+)\s+connections`),
		regexp.MustCompile(`only when (\d+) are`),
	} {
		m := re.FindSubmatch(data)
		if m == nil {
			t.Errorf("docs/SIMULATION.md no longer says %q: update this test if the text moved", re)
			continue
		}
		if got := string(m[1]); got != fmt.Sprint(pipeFlushers) {
			t.Errorf("docs/SIMULATION.md: %q, but pipeFlushers is %d", m[0], pipeFlushers)
		}
	}
}
