package daemon

import (
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
)

// A day's accepted refunds are handed to releases once each: what a release
// could not record (the ledger refused it) goes to the next one of the same
// day; another day's release takes none of them.
func TestRefundsAreReportedOnceAndHandedBack(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	ds := &dayState{day: bucket.Day{Key: "2026-11-21", Start: t0.Add(-10 * time.Hour), End: t0.Add(14 * time.Hour)}, b: bucket.New(1_000_000)}
	if err := ds.b.AddGrant(t0, bucket.Grant{ID: "L1", Amount: 1_000_000, Start: t0, End: t0.Add(time.Minute), DripEnd: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	c := &campaign{}
	c.day.Store(ds)
	at := t0.Add(2 * time.Second)
	refund := func(n int64) {
		t.Helper()
		if !ds.b.Spend(at, n) {
			t.Fatalf("SPEND of %d refused", n)
		}
		if got := ds.b.Refund(at, n); got != n {
			t.Fatalf("refund of %d: %d accepted", n, got)
		}
	}
	for _, step := range []struct {
		name string
		do   func()
		day  string
		want int64
	}{
		{"none yet", func() {}, "2026-11-21", 0},
		{"two refunds", func() { refund(300); refund(200) }, "2026-11-21", 500},
		{"taken already", func() {}, "2026-11-21", 0},
		{"refused release hands them back", func() { c.untakeRefunds("2026-11-21", 500) }, "2026-11-21", 500},
		{"another day's release", func() { refund(70) }, "2026-11-22", 0},
		{"the day's next release", func() {}, "2026-11-21", 70},
		{"a hand-back for another day changes nothing", func() { c.untakeRefunds("2026-11-20", 70) }, "2026-11-21", 0},
	} {
		step.do()
		if got := c.takeRefunds(at, step.day); got != step.want {
			t.Errorf("%s: a release of %s takes %d micros of refunds, want %d", step.name, step.day, got, step.want)
		}
	}
}
