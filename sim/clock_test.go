package sim

import (
	"strconv"
	"testing"
	"time"
)

// A host clock's timer fires when the run moves the clock past it, not
// when wall time passes; a stopped one never fires.
func TestHostClockTimersRunOnSimulatedTime(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	c := &hostClock{}
	c.set(t0)
	due, _ := c.NewTimer(5 * time.Millisecond)
	stopped, stop := c.NewTimer(5 * time.Millisecond)
	later, _ := c.NewTimer(time.Second)
	if !stop() || stop() {
		t.Fatal("stop: want true for a pending timer, then false")
	}
	time.Sleep(20 * time.Millisecond) // wall time passing moves nothing
	select {
	case <-due:
		t.Fatal("a timer fired with the clock standing still")
	default:
	}
	c.set(t0.Add(5 * time.Millisecond))
	select {
	case at := <-due:
		if !at.Equal(t0.Add(5 * time.Millisecond)) {
			t.Fatalf("fired at %v, want the clock's %v", at, t0.Add(5*time.Millisecond))
		}
	default:
		t.Fatal("the clock moved 5 ms past a 5-ms timer and it did not fire")
	}
	select {
	case <-stopped:
		t.Fatal("a stopped timer fired")
	case <-later:
		t.Fatal("a 1-s timer fired 5 ms on")
	default:
	}
	c.set(t0.Add(time.Second))
	if _, ok := <-later; !ok || c.n.Load() != 0 {
		t.Fatalf("the 1-s timer: pending %d after it fired", c.n.Load())
	}
}

// A sparse SPEND's fetch waits in simulated time (daemon.WaitClock), so a
// run does not depend on how loaded the machine is: with a sparse_wait of
// 1 µs, which no real ledger call meets in wall time, the tiny scenario's
// fetches are all on time and every pacing invariant holds (runScenario).
// When the fetch waited on the wall clock, that run had 1,756 of 1,807
// fetches late and its 24 budgets fell 6-46x the "behind" bound behind
// their curves; at the 5-ms default the same happened to some fetches on a
// loaded machine (the tiny scenario's worst budget at 1.05x the bound at
// load 17).
func TestSparseFetchWaitsInSimulatedTime(t *testing.T) {
	wait := time.Microsecond
	res := runScenario(t, "../configs/scenarios/tiny.yaml", Options{SparseWait: &wait})
	var fetches int
	for _, h := range res.Hosts {
		n, _ := strconv.Atoi(h.Daemon["sparse_fetches"])
		fetches += n
		if late := h.Daemon["sparse_fetches_late"]; late != "0" {
			t.Errorf("%s: %s of %d fetches late; a fetch in the simulator ends when the ledger answers", h.Name, late, n)
		}
	}
	if fetches < 100 {
		t.Errorf("%d fetches in all; the tiny scenario's SPENDs should fetch hundreds", fetches)
	}
	for _, c := range res.Campaigns {
		t.Logf("%s: utilisation %.4f, behind at most %.2f of the bound", c.ID, c.Results[StrategyPacer].Utilisation,
			float64(c.BehindMaxMicros)/float64(max(c.BehindBoundMicros, 1)))
	}
}
