package transport

import (
	"math"
	"runtime/debug"
	"testing"
)

// The governor holds the runtime's soft memory limit at what the process
// held when the burst began plus each server's allowance, follows the
// connections, keeps a lower limit set before, and restores it at the end.
func TestMemoryGovernorFollowsTheBurst(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
	var g memGovernor
	a := &Server{cfg: ServerConfig{MaxBufferedBytes: 16 << 20}}
	b := &Server{cfg: ServerConfig{MaxBufferedBytes: 1 << 20}}

	held, ok := runtimeHeld()
	if !ok || held <= 0 {
		t.Fatalf("runtimeHeld() = %d, %v", held, ok)
	}
	g.hold(a, 1000)
	lim := debug.SetMemoryLimit(-1)
	// What the runtime held, less 1,000 connections' share, plus a's
	// allowance for them: within what the runtime allocated meanwhile.
	if want := held + 16<<20; lim < want || lim > want+4<<20 {
		t.Errorf("limit with 1,000 connections = %d, want about %d", lim, want)
	}
	g.hold(a, 3000)
	if got := debug.SetMemoryLimit(-1); got != lim+2000*connMemory {
		t.Errorf("limit with 3,000 connections = %d, want %d", got, lim+2000*connMemory)
	}
	g.hold(b, 0)
	if got := debug.SetMemoryLimit(-1); got != lim+2000*connMemory+1<<20 {
		t.Errorf("limit with a second server = %d, want %d", got, lim+2000*connMemory+1<<20)
	}
	g.release(a)
	g.release(a) // twice: nothing
	if got := debug.SetMemoryLimit(-1); got != lim-1000*connMemory-15<<20 {
		t.Errorf("limit with b alone = %d, want %d", got, lim-1000*connMemory-15<<20)
	}
	g.release(b)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit after the bursts = %d, want it restored to %d", got, int64(math.MaxInt64))
	}

	// A lower limit set before (GOMEMLIMIT) stays, and is restored.
	debug.SetMemoryLimit(held / 2)
	g.hold(a, 5000)
	if got := debug.SetMemoryLimit(-1); got != held/2 {
		t.Errorf("limit under a lower GOMEMLIMIT = %d, want %d", got, held/2)
	}
	g.release(a)
	if got := debug.SetMemoryLimit(-1); got != held/2 {
		t.Errorf("limit after = %d, want %d", got, held/2)
	}
}

// An allowance that would overflow leaves the limit unlimited (not wrapped
// negative, which SetMemoryLimit would take for "no change").
func TestMemoryGovernorOverflow(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
	var g memGovernor
	g.hold(&Server{cfg: ServerConfig{MaxBufferedBytes: math.MaxInt64 - 1}}, 10)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit = %d, want %d", got, int64(math.MaxInt64))
	}
}

func TestAllowanceSaturates(t *testing.T) {
	s := &Server{cfg: ServerConfig{MaxBufferedBytes: math.MaxInt64 - 1}}
	if got := s.allowance(10); got != math.MaxInt64 {
		t.Errorf("allowance = %d, want %d", got, int64(math.MaxInt64))
	}
	s.cfg.MaxBufferedBytes = 1 << 20
	if got := s.allowance(3); got != 1<<20+3*connMemory {
		t.Errorf("allowance = %d, want %d", got, 1<<20+3*connMemory)
	}
}
