package bucket

import "testing"

// The moving average wraps: 23:45 is next to 00:00.
func TestSmoothIsCircular(t *testing.T) {
	x := make([]float64, 24)
	x[0] = 4
	got := smooth(x, 1)
	if got[23] != 1 || got[0] != 2 || got[1] != 1 || got[2] != 0 {
		t.Errorf("smooth: %v", got)
	}
}
