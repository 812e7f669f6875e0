package daemon

import (
	"testing"
	"time"
)

// sparseInterval is the mean gap between the last sparseSpends ticks that saw
// a SPEND, across the ring's wrap, and 0 before two of them.
func TestSparseIntervalOverLastSpends(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	c := &campaign{}
	record := func(at time.Duration) {
		c.demandTicks[c.demandTickN%sparseSpends] = t0.Add(at)
		c.demandTickN++
	}
	if got := c.sparseInterval(); got != 0 {
		t.Fatalf("no SPEND: interval %v, want 0", got)
	}
	record(0)
	if got := c.sparseInterval(); got != 0 {
		t.Fatalf("one SPEND: interval %v, want 0", got)
	}
	record(2 * time.Hour)
	if got := c.sparseInterval(); got != 2*time.Hour {
		t.Fatalf("two SPENDs 2h apart: interval %v, want 2h", got)
	}
	for _, at := range []time.Duration{3, 4, 10, 11, 12} { // hours; the ring keeps 10, 11, 12 and 4
		record(at * time.Hour)
	}
	if got, want := c.sparseInterval(), (12*time.Hour-4*time.Hour)/3; got != want {
		t.Fatalf("after the ring wrapped: interval %v, want %v (the last %d SPENDs)", got, want, sparseSpends)
	}
}

// seenUnit is the second largest of the windows' largest SPENDs once three
// windows had one, so one outlier does not become the bid.
func TestSeenUnitIgnoresOneOutlier(t *testing.T) {
	c := &campaign{}
	c.unitHistory[0] = 2_000
	if got := c.seenUnit(); got != 2_000 {
		t.Fatalf("one window: unit %d, want 2000", got)
	}
	c.unitHistory[1] = 11_000 // an outlier
	if got := c.seenUnit(); got != 11_000 {
		t.Fatalf("two windows: unit %d, want the largest (11000)", got)
	}
	c.unitHistory[2] = 1_500
	if got := c.seenUnit(); got != 2_000 {
		t.Fatalf("three windows, one outlier: unit %d, want 2000", got)
	}
	c.maxAmount.Store(3_000) // this window's largest counts too
	if got, n := c.seenUnit(), c.unitWindowsSeen(); got != 3_000 || n != 4 {
		t.Fatalf("with this window: unit %d over %d windows, want 3000 over 4", got, n)
	}
}
