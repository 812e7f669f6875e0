package transport

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// connMemory is what the socket allows itself per open connection, beside
// the buffer budget: the bound pacerd's memory keeps under any client
// behaviour is what it held before the connections came, plus
// max_buffered_bytes, plus connMemory for each open connection.
const connMemory = 8 << 10

// memGovernor keeps the bidder socket's memory within its bound while a
// burst of connections is open (Server.watchBurst), through the Go
// runtime's soft memory limit (debug.SetMemoryLimit):
//
//	limit = held + Σ over servers in a burst (max_buffered_bytes + connMemory × open)
//
// where held is what the runtime held (all its memory classes less the
// pages it has released) when the first burst began, less connMemory for
// each connection then open. Without it the garbage collector lets the heap
// grow to twice what is live (GOGC=100) and a goroutine's stack is never
// below 4 KiB once it has served a request, so a connection of the
// goroutines server could cost 13–14 KiB; with it the collector runs more
// often during the burst instead, and returns pages as connections close
// (the limit falls with them). A limit set before (GOMEMLIMIT) is kept if
// lower, and restored when the last burst ends.
//
// The limit never falls below what was live when the burst began plus the
// allowance of the connections open, so the collector is not driven to
// collect continuously: a connection holds well under connMemory (about
// 5.5 KiB with a goroutine, under 1 KiB on an event loop).
type memGovernor struct {
	mu      sync.Mutex
	servers map[*Server]int64 // each server's allowance
	held    int64
	before  int64 // the limit when the first burst began
}

var governor memGovernor

// allowance is what a server in a burst may hold beyond what the process
// held before it.
// It saturates at math.MaxInt64.
func (s *Server) allowance(open int) int64 {
	conns := int64(open)
	if conns > (math.MaxInt64-s.cfg.MaxBufferedBytes)/connMemory {
		return math.MaxInt64
	}
	return s.cfg.MaxBufferedBytes + connMemory*conns
}

// hold sets or updates s's allowance, with open connections open now.
func (g *memGovernor) hold(s *Server, open int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.servers == nil {
		g.servers = make(map[*Server]int64)
	}
	if len(g.servers) == 0 {
		g.before = debug.SetMemoryLimit(-1)
		g.held = math.MaxInt64 // the runtime does not say: leave the limit alone
		if held, ok := runtimeHeld(); ok {
			g.held = max(0, held-connMemory*int64(open))
		}
	}
	g.servers[s] = s.allowance(open)
	g.apply()
}

// release ends s's burst; the last one restores the limit from before.
func (g *memGovernor) release(s *Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.servers[s]; !ok {
		return
	}
	delete(g.servers, s)
	if len(g.servers) == 0 {
		debug.SetMemoryLimit(g.before)
		return
	}
	g.apply()
}

// apply sets the limit for the servers held. Called with g.mu held.
func (g *memGovernor) apply() {
	limit := g.held
	for _, a := range g.servers {
		if limit >= math.MaxInt64-a {
			limit = math.MaxInt64
			break
		}
		limit += a
	}
	debug.SetMemoryLimit(min(limit, g.before))
}

var heldMetrics = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

// runtimeHeld is the memory the Go runtime holds from the system: every
// class it counts, less the heap pages it has released.
func runtimeHeld() (int64, bool) {
	s := make([]metrics.Sample, len(heldMetrics))
	for i, name := range heldMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64()), true
}
