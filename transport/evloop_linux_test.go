package transport

import (
	"testing"
	"time"
)

// TestLoopYield: a loop yields its P at most once per loopYieldEvery of its
// own clock readings, and at once after a wait that long.
func TestLoopYield(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	yields := 0
	y := loopYield{last: t0, yield: func() { yields++ }}
	steps := []struct {
		at   time.Duration // after t0
		want int           // yields so far
	}{
		{0, 0},
		{time.Millisecond, 0},
		{loopYieldEvery - time.Nanosecond, 0},
		{loopYieldEvery, 1},
		{loopYieldEvery + time.Millisecond, 1},
		{2*loopYieldEvery - time.Nanosecond, 1},
		{2 * loopYieldEvery, 2},
		{time.Second, 3}, // a long wait: one yield, not one per interval missed
		{time.Second + loopYieldEvery/2, 3},
		{time.Second + loopYieldEvery, 4},
	}
	for _, s := range steps {
		y.maybe(t0.Add(s.at))
		if yields != s.want {
			t.Fatalf("at t0+%v: %d yields, want %d", s.at, yields, s.want)
		}
	}
}

// TestLoopYieldInterval: the interval must stay well under the runtime's
// forcePreemptNS (10 ms), or sysmon preempts the loop between yields.
func TestLoopYieldInterval(t *testing.T) {
	if loopYieldEvery <= 0 || loopYieldEvery > 5*time.Millisecond {
		t.Fatalf("loopYieldEvery = %v, want within (0, 5ms]", loopYieldEvery)
	}
}
