package pace

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// randomInput draws an input over the whole range a host can meet: budgets
// from a micro to a million dollars, any curve position, demand from none
// to thousands of times the pace, any share, any open drip.
func randomInput(r *rand.Rand) Input {
	budget := int64(math.Exp(r.Float64() * math.Log(1e12)))
	cNow := r.Int64N(PPB + 1)
	if r.IntN(8) == 0 {
		cNow = PPB
	}
	cNext := cNow + r.Int64N(PPB-cNow+1)/max(1, r.Int64N(2000))
	in := Input{
		Budget:          budget,
		Remaining:       r.Int64N(budget+1) * int64(r.IntN(8)) / 7,
		CurveNow:        cNow,
		CurveNext:       cNext,
		Window:          time.Duration(1+r.IntN(120)) * time.Second,
		Drip:            time.Duration(r.IntN(120)) * time.Second,
		CatchUpPermille: 1000 + r.Int64N(8000),
		Bid:             r.Int64N(budget/10 + 1),
		Largest:         r.Int64N(budget/10 + 1),
		DemandRate:      r.Float64() * float64(budget) / 3600,
		DemandCalls:     r.Float64() * 1000,
		OpenDrip:        r.Int64N(budget/3600 + 1),
		Burst:           time.Duration(r.IntN(5)) * time.Second,
		EndingDrip:      r.Int64N(budget/3600+1) * int64(r.IntN(2)),
	}
	switch r.IntN(3) {
	case 0:
		in.Share = 0
	case 1:
		in.Share = 1
	default:
		in.Share = r.Float64()
	}
	if r.IntN(4) == 0 {
		in.OpenDrip = 0
	}
	if r.IntN(2) == 0 {
		in.Stale = r.Int64N(in.Remaining + 1)
	}
	return in
}

const rounds = 200_000

func TestFleetIsThePaceOrAtMostTheCatchUpMultiple(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range rounds {
		in := randomInput(r)
		d := Plan(in)
		if in.CurveNow >= PPB {
			if d.FleetWindow != in.Remaining {
				t.Fatalf("past the curve's end the fleet may take all that is left (%d), got %d: %+v", in.Remaining, d.FleetWindow, in)
			}
			continue
		}
		k := float64(in.CatchUpPermille) / 1000
		if d.FleetWindow < d.Pace || float64(d.FleetWindow) > k*float64(d.Pace)+1 {
			t.Fatalf("fleet window %d outside [p, k·p] = [%d, %.0f]: %+v", d.FleetWindow, d.Pace, k*float64(d.Pace), in)
		}
		if d.FleetPace < d.Pace || d.FleetPace > d.FleetWindow {
			t.Fatalf("fleet pace %d outside [p %d, window %d]: %+v", d.FleetPace, d.Pace, d.FleetWindow, in)
		}
		if d.Catching && !d.Behind {
			t.Fatalf("catching but not behind: %+v", in)
		}
	}
}

func TestHostNeverTargetsMoreThanTheFleetOrItsShare(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range rounds {
		in := randomInput(r)
		d := Plan(in)
		w := in.Window.Seconds()
		if in.CurveNow >= PPB {
			if want := max(in.DemandRate*Headroom(in.DemandCalls, in.Window), float64(d.Floor)/w); d.HostRate != want {
				t.Fatalf("past the curve's end the host's target is its demand with headroom (%.1f), got %.1f: %+v", want, d.HostRate, in)
			}
			continue
		}
		fleetRate := float64(d.FleetWindow) / w
		if d.HostRate > fleetRate*(1+1e-9) {
			t.Fatalf("host rate %.1f above the fleet's %.1f: %+v", d.HostRate, fleetRate, in)
		}
		if Metered(in.Share) {
			paced := Headroom(in.DemandCalls, in.Window) * float64(d.Pace) / w
			if bound := in.Share * max(fleetRate, paced); d.HostRate > bound*(1+1e-9) {
				t.Fatalf("host rate %.1f above its share's bound %.1f: %+v", d.HostRate, bound, in)
			}
		}
	}
}

// A fleet of hosts that know their shares (summing to 1), each with its own
// demand, SPEND rate and largest SPEND, targets between them at most the
// fleet's window, or the largest headroom times the pace if more: each
// host's headroom is over the pace, not over the catch-up (condition 2).
// So a fleet catching up at k ≥ MaxHeadroom targets at most k times the
// pace between its hosts, as one host alone does. (With the headroom over
// the fleet's window, a fleet far behind targeted up to h·k·p: at k = 3,
// 1.3-2.5 times its window.)
func TestFleetTargetsAtMostItsWindowBetweenItsHosts(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for range rounds / 10 {
		in := randomInput(r)
		if in.CurveNow >= PPB || in.Window <= 0 {
			continue
		}
		n := 2 + r.IntN(15)
		shares := make([]float64, n)
		var sum float64
		for i := range shares {
			shares[i] = 0.01 + r.Float64()
			sum += shares[i]
		}
		var total, headroom float64
		var d Decision
		for i := range shares {
			h := in
			h.Share = shares[i] / sum
			h.DemandRate = r.Float64() * float64(in.Budget) / 3600
			h.DemandCalls = r.Float64() * 1000
			h.Largest = r.Int64N(in.Budget/10 + 1)
			d = Plan(h)
			total += d.HostRate
			headroom = max(headroom, Headroom(h.DemandCalls, h.Window))
		}
		w := in.Window.Seconds()
		bound := max(float64(d.FleetWindow), headroom*float64(d.Pace)) / w
		if total > bound*(1+1e-9)+1e-9 {
			t.Fatalf("%d hosts target %.1f/s between them, above the fleet's window %d or %.2f times the pace %d over %v (%.1f/s): %+v",
				n, total, d.FleetWindow, headroom, d.Pace, in.Window, bound, in)
		}
		if float64(d.FleetWindow) >= MaxHeadroom*float64(d.Pace) && total > float64(d.FleetWindow)/w*(1+1e-9)+1e-9 {
			t.Fatalf("a fleet catching up at %.2fx its pace targets %.1f/s between its %d hosts, above its window's %.1f/s: %+v",
				float64(d.FleetWindow)/float64(max(d.Pace, 1)), total, n, float64(d.FleetWindow)/w, in)
		}
	}
}

func TestHostDripsNoMoreThanItsTarget(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range rounds {
		in := randomInput(r)
		d := Plan(in)
		if d.Ask < 0 {
			t.Fatalf("negative ask %d: %+v", d.Ask, in)
		}
		if d.Ask == 0 {
			continue
		}
		w := in.Window.Seconds()
		if in.Drip > 0 && in.Drip < in.Window {
			w = in.Drip.Seconds()
		}
		drip := float64(in.OpenDrip) + float64(d.Ask)/w
		if over := drip - d.HostRate; over > 1 && d.Ask > d.Floor {
			t.Fatalf("open drip %d + ask %d over %.0fs = %.1f/s, above the target %.1f (floor %d): %+v",
				in.OpenDrip, d.Ask, w, drip, d.HostRate, d.Floor, in)
		}
		if d.Ask < d.Floor {
			t.Fatalf("ask %d below the floor %d: %+v", d.Ask, d.Floor, in)
		}
	}
}

func TestAsksOnlyWhenTheGapIsWorthACall(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range rounds {
		in := randomInput(r)
		d := Plan(in)
		gap := d.HostRate - float64(in.OpenDrip)
		worth := in.OpenDrip == 0 || (gap >= d.HostRate/4 && in.Remaining > 0)
		if (d.Ask > 0) != worth {
			t.Fatalf("ask %d with open drip %d and target %.1f (gap %.1f): want an ask iff nothing is open or the gap is a quarter of the target: %+v",
				d.Ask, in.OpenDrip, d.HostRate, gap, in)
		}
	}
}

// The floor is a few of the host's largest SPENDs or a sixteenth of a
// window of pace, never the catch-up's: a host far behind its curve with
// no demand asks for no more than that.
func TestIdleHostBehindItsCurveAsksOnlyTheFloor(t *testing.T) {
	in := Input{Budget: 86_400_000_000, Remaining: 86_400_000_000, CurveNow: PPB / 2, CurveNext: PPB/2 + PPB/2880,
		Window: 30 * time.Second, CatchUpPermille: 3000, Largest: 1000}
	d := Plan(in)
	if d.Pace < 29_999_000 || d.Pace > 30_000_000 || d.FleetWindow != 3*d.Pace {
		t.Fatalf("pace %d, fleet window %d; want about 30,000,000 and 3x that", d.Pace, d.FleetWindow)
	}
	if d.Ask != d.Pace/16 {
		t.Fatalf("an idle host asks %d; want the floor, a sixteenth of the pace (%d)", d.Ask, d.Pace/16)
	}
}

// The case: a campaign opened at noon with nothing spent, one host
// with unbounded demand. Its first ask drips at exactly 3x the pace; with
// that lease open, it asks for nothing more.
func TestCatchUpFromFarBehindIsThreeTimesThePace(t *testing.T) {
	in := Input{Budget: 864_000_000, Remaining: 864_000_000, CurveNow: PPB / 2, CurveNext: PPB/2 + PPB/2880,
		Window: 30 * time.Second, CatchUpPermille: 3000, Largest: 1000, DemandRate: 1e6, DemandCalls: 1000, Share: 1}
	d := Plan(in)
	if want := 3 * d.Pace; d.Ask != want {
		t.Fatalf("ask %d; want 3x the window's pace %d", d.Ask, want)
	}
	in.OpenDrip = d.Ask / 30
	if d2 := Plan(in); d2.Ask != 0 {
		t.Fatalf("with the catch-up lease open it asks %d more; want 0", d2.Ask)
	}
}

func TestLastHourCatchUp(t *testing.T) {
	for _, tc := range []struct {
		until time.Duration
		want  int64
	}{
		{3 * time.Hour, 3000},
		{time.Hour + 5*time.Minute, 1250},
		{10 * time.Minute, 1250},
	} {
		if got := CatchUpPermille(3, tc.until, 5*time.Minute); got != tc.want {
			t.Errorf("CatchUpPermille(3, %s before the day's end) = %d; want %d", tc.until, got, tc.want)
		}
	}
	if got := CatchUpPermille(1, time.Minute, 5*time.Minute); got != 1000 {
		t.Errorf("a configured 1x stays 1x in the last hour, got %d", got)
	}
}

// A host whose open leases supply less than a quarter of its target is
// starting, and is credited a burst window of its target at once; one
// supplied beyond that is credited nothing at once.
func TestStartingHostIsCreditedABurstWindowOfItsTarget(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range rounds {
		in := randomInput(r)
		d := Plan(in)
		starting := float64(in.OpenDrip+in.EndingDrip) < d.HostRate/4
		if d.Starting != starting {
			t.Fatalf("starting %v with open drip %d and target %.1f: %+v", d.Starting, in.OpenDrip, d.HostRate, in)
		}
		want := int64(0)
		if starting {
			want = max(int64(d.HostRate*in.Burst.Seconds()), in.Largest)
		}
		if d.StartCredit != want {
			t.Fatalf("start credit %d; want %d (target %.1f, burst %s): %+v", d.StartCredit, want, d.HostRate, in.Burst, in)
		}
	}
}

func TestPlanIsPure(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 10_000 {
		in := randomInput(r)
		if a, b := Plan(in), Plan(in); a != b {
			t.Fatalf("two plans of one input differ: %+v and %+v", a, b)
		}
	}
}
