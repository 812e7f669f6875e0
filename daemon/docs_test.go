package daemon

import (
	"fmt"
	"os"
	"regexp"
	"testing"
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
