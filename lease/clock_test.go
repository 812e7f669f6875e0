package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

func TestMeasureClockOffset(t *testing.T) {
	rdb := redistest.Start(t).Client()
	for _, tc := range []struct {
		shift   time.Duration
		bound   time.Duration
		refused string // "" = within the bound
	}{
		{shift: 0, bound: time.Second},
		{shift: 700 * time.Millisecond, bound: time.Second},
		{shift: -700 * time.Millisecond, bound: time.Second},
		{shift: 60 * time.Second, bound: time.Second, refused: "1m0s ahead of redis at "},
		{shift: -60 * time.Second, bound: time.Second, refused: "1m0s behind redis at "},
		{shift: 1500 * time.Millisecond, bound: time.Second, refused: "1.5s ahead of"},
	} {
		now := func() time.Time { return time.Now().Add(tc.shift) }
		o, err := lease.MeasureClockOffset(ctx, rdb, now)
		if err != nil {
			t.Fatal(err)
		}
		// Redis TIME has microseconds and the same host clock: the offset is
		// the shift, to within the round trip (and a scheduling hiccup).
		if d := o.Offset - tc.shift; d < -50*time.Millisecond || d > 50*time.Millisecond || o.RTT <= 0 {
			t.Errorf("shift %v: measured %+v", tc.shift, o)
		}
		err = o.Check(tc.bound)
		if tc.refused == "" {
			if err != nil {
				t.Errorf("shift %v within %v: %v", tc.shift, tc.bound, err)
			}
			continue
		}
		var se *lease.ClockSkewError
		if !errors.As(err, &se) || !errors.Is(err, lease.ErrClockSkew) || !strings.Contains(err.Error(), tc.refused) ||
			!strings.Contains(err.Error(), "lease.skew_bound 1s") {
			t.Errorf("shift %v: %v; want a *ClockSkewError saying %q", tc.shift, err, tc.refused)
		}
	}
}

func TestClockOffsetUncertaintyCounts(t *testing.T) {
	// 900ms measured with a 400ms round trip may be 1.1s: refused.
	o := lease.ClockOffset{Addr: "x", Offset: 900 * time.Millisecond, RTT: 400 * time.Millisecond}
	if err := o.Check(time.Second); !errors.Is(err, lease.ErrClockSkew) {
		t.Fatalf("Check = %v, want refused", err)
	}
	o.RTT = 100 * time.Millisecond
	if err := o.Check(time.Second); err != nil {
		t.Fatalf("Check = %v, want accepted", err)
	}
}
