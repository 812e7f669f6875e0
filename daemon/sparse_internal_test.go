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

// unitWindowsSeen counts the windows the bid is taken over: this one if it
// had a SPEND, and those of the history that had one.
func TestUnitWindowsSeen(t *testing.T) {
	c := &campaign{}
	if n := c.unitWindowsSeen(); n != 0 {
		t.Fatalf("no SPEND: %d windows, want 0", n)
	}
	c.unitHistory[0], c.unitHistory[3] = 2_000, 1_500
	c.maxAmount.Store(3_000)
	if n := c.unitWindowsSeen(); n != 3 {
		t.Fatalf("%d windows, want 3 (two in the history, this one)", n)
	}
	if u := c.seenUnit(); u != 3_000 {
		t.Fatalf("unit %d, want the largest, 3000", u)
	}
}
