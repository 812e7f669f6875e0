package sim

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// A host's generator draws a step's arrivals while its daemon steps, and
// serve hands them to the daemon afterwards: over the smoke scenario's
// first two hours, each host asked its daemon, per campaign, for exactly
// the SPENDs and micros that the host's random source gives when drawn in
// the generator's order (arrival tick, then campaign; a count, then its
// bids), and the baselines counted the same arrivals. A SPEND lost,
// repeated or drawn out of order between the two goroutines changes these
// sums.
func TestServedArrivalsAreTheGeneratorsDraws(t *testing.T) {
	ctx := context.Background()
	sc, err := LoadScenario("../configs/scenarios/smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	r := &runner{sc: sc, log: zap.NewNop(), bid: newBidder(sc.Bids), luaScript: redis.NewScript(luaCheckAndDecrement)}
	defer r.close()
	if err := r.setup(ctx, srv.Socket); err != nil {
		t.Fatal(err)
	}
	w := r.startHosts(ctx)
	type sums struct{ n, micros int64 }
	want := make([][]sums, len(r.hosts))
	ref := make([]*rand.Rand, len(r.hosts))
	for i := range r.hosts {
		want[i] = make([]sums, len(r.camps))
		ref[i] = rand.New(rand.NewPCG(sc.Seed, uint64(i)+1)) // openHost's arrivals source
	}
	step, tick := time.Duration(sc.Step), time.Duration(sc.ArrivalTick)
	for now := r.start; now.Before(r.start.Add(2 * time.Hour)); now = now.Add(step) {
		for _, h := range r.hosts {
			h.clock.set(now)
		}
		r.bookkeeping(ctx, now)
		r.stepHosts(ctx, w, now)
		for hi, h := range r.hosts {
			lambda := r.lambdas(h, now, tick)
			for k := range int(step / tick) {
				at := now.Add(time.Duration(k) * tick)
				for ci, c := range r.camps {
					for range poisson(ref[hi], lambda[ci]) {
						amount := r.bid.draw(ref[hi])
						if !at.Before(c.day.Start) {
							want[hi][ci].n++
							want[hi][ci].micros += amount
						}
					}
				}
			}
		}
	}
	w.stop()
	for hi, h := range r.hosts {
		if err := h.d.Close(ctx); err != nil {
			t.Error(err)
		}
		for ci, c := range r.camps {
			hc, ws := &h.c[ci], want[hi][ci]
			if ws.n == 0 {
				t.Fatalf("%s %s: no arrivals drawn in two hours; the test needs some", h.name, c.spec.ID)
			}
			if hc.requests != ws.n || hc.askedMicros != ws.micros {
				t.Errorf("%s %s: the daemon was asked %d SPENDs for %d micros; the host's draws are %d for %d",
					h.name, c.spec.ID, hc.requests, hc.askedMicros, ws.n, ws.micros)
			}
			if c.inBL && hc.seq != ws.n {
				t.Errorf("%s %s: the baselines counted %d arrivals; the host's draws are %d", h.name, c.spec.ID, hc.seq, ws.n)
			}
		}
	}
}
