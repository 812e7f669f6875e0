package bucket

import "testing"

// The moving average stays within the day: 00:00's demand gives 23:00 no
// share (a day's budget cannot meet the next day's traffic), and a slot at
// either end averages over its own day's slots only (weights 2 and 1 at
// 00:00, 1, 2 and 1 at 01:00).
func TestSmoothStaysInTheDay(t *testing.T) {
	x := make([]float64, 24)
	x[0], x[23] = 3, 6
	got := smooth(x, 1)
	if got[0] != 2 || got[1] != 0.75 || got[2] != 0 || got[22] != 1.5 || got[23] != 4 {
		t.Errorf("smooth: %v; want 2, 0.75, 0, ..., 0, 1.5, 4", got)
	}
}
