package daemon

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
)

// TestDocsQuoteTheAuctionIDWindow: the manual says how long auction ids are
// remembered; it must be the daemon's default.
func TestDocsQuoteTheAuctionIDWindow(t *testing.T) {
	c := DefaultConfig()
	c.setDefaults()
	want := fmt.Sprint(c.DedupWindow.Minutes())
	data, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, phrase := range []*regexp.Regexp{
		regexp.MustCompile(`remembered: ([0-9]+) minutes`),
		regexp.MustCompile(`first ([0-9]+) minutes of a campaign-day \(the auction-id window\)`),
	} {
		m := phrase.FindAllSubmatch(data, -1)
		if len(m) == 0 {
			t.Errorf("docs/PROTOCOL.md no longer says %q: update this test if the text moved", phrase)
		}
		for _, m := range m {
			if string(m[1]) != want {
				t.Errorf("docs/PROTOCOL.md: %q, but the auction-id window is %s minutes", m[0], want)
			}
		}
	}
}

// TestDocsQuoteTheDemandFlush: the manual's pacerctl top says how often
// daemons add their SPEND counts to the ledger; it must be the daemon's.
func TestDocsQuoteTheDemandFlush(t *testing.T) {
	data, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	phrase := regexp.MustCompile(`ledger once a (minute) \(a campaign with few SPENDs every ([0-9]+) minutes\)`)
	m := phrase.FindSubmatch(data)
	if m == nil {
		t.Fatalf("docs/OPERATIONS.md no longer says %q: update this test if the text moved", phrase)
	}
	if demandFlush != time.Minute || string(m[2]) != fmt.Sprint(sparseDemandFlush.Minutes()) {
		t.Errorf("docs/OPERATIONS.md: %q, but daemons flush every %v, a sparse campaign every %v", m[0], demandFlush, sparseDemandFlush)
	}
}

// docs/PACING.md quotes the ledger advance's bound in mean SPENDs, the
// curve fit's counts and the spans shares are judged on: the quotes must
// carry the daemon's values.
func TestPacingDocQuotesTheAdvance(t *testing.T) {
	data, err := os.ReadFile("../docs/PACING.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		phrase *regexp.Regexp
		want   string
	}{
		{regexp.MustCompile(`at least\s+([0-9.]+) of them`), fmt.Sprint(pace.MinAdvanceMeans)},
		{regexp.MustCompile(`its own mean over\s+its last ([0-9]+)`), fmt.Sprint(meanSpendWindow)},
		{regexp.MustCompile(`its latest\s+([0-9]+)\s+as the host's`), fmt.Sprint(lease.FleetSpends)},
		{regexp.MustCompile(`usual bid as ([0-9]+)\s+SPENDs would`), fmt.Sprint(pace.MeanPriorSpends)},
		{regexp.MustCompile(`or ([0-9.]+)% of\s+the daily budget if that`), fmt.Sprint(float64(pace.AdvancePermille) / 10)},
		{regexp.MustCompile(`weighs at least ([0-9]+) recorded`), fmt.Sprint(AutoCurveSlotRequests)},
		{regexp.MustCompile(`at most (\w+) 15-minute slots`), map[int]string{1: "one", 2: "two", 3: "three"}[bucket.DefaultSmooth(AutoCurveSlots)]},
		{regexp.MustCompile(`demand of the ([0-9]+) days before \(flat below ([0-9]+) SPENDs`), fmt.Sprint(AutoCurveDays)},
		{regexp.MustCompile(`the latest of its flushes at least\s+([0-9]+)\s+minutes before its last`), fmt.Sprint(shareSpanMinutes)},
		{regexp.MustCompile(`the ledger keeps the latest ([0-9]+)\s+minutes`), fmt.Sprint(lease.RecentMinutes)},
	} {
		m := c.phrase.FindAllSubmatch(data, -1)
		if len(m) == 0 {
			t.Errorf("docs/PACING.md no longer says %q: update this test if the text moved", c.phrase)
		}
		for _, m := range m {
			if string(m[1]) != c.want {
				t.Errorf("docs/PACING.md: %q, but the daemon says %s", m[0], c.want)
			}
		}
	}
}

// TestProtocolDocNamesEveryInfoField: docs/PROTOCOL.md's INFO section names
// every key of the daemon's INFO section, and no key the daemon does not
// send.
func TestProtocolDocNamesEveryInfoField(t *testing.T) {
	data, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "`# pacer`, the daemon:")
	end := strings.Index(doc, "`# transport`, the socket:")
	if start < 0 || end < start {
		t.Fatal("docs/PROTOCOL.md has no INFO section with a `# pacer` table before `# transport`")
	}
	d, err := New(nil, Config{Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	for _, f := range d.Info() {
		sent[f.Key] = true
		if !strings.Contains(doc[start:end], "`"+f.Key+"`") {
			t.Errorf("INFO sends %q; docs/PROTOCOL.md's INFO section does not name it", f.Key)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| ((?:`[a-z_]+`(?:, )?)+) \\|").FindAllStringSubmatch(doc[start:end], -1) {
		for _, k := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[1], -1) {
			if !sent[k[1]] {
				t.Errorf("docs/PROTOCOL.md's INFO section names %q; the daemon does not send it", k[1])
			}
		}
	}
}
