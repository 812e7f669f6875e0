package main

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
)

// Two pacerd processes spending one campaign (111,000 micros a second,
// flat, far behind its curve: the ledger releases what the cap window
// holds, then catches up at 3x) with demand of 1,600,000 micros a second,
// more than the ledger releases, SIGKILLed in turn
// and restarted at once on their state_dirs, as systemd does: each restart
// gives back what its predecessor's leases held unspent (the journal and
// the spent map), so what the ledger counts spent and no client was
// allowed stays within 1% of what it counts spent, and no client was
// allowed more than the ledger counts spent. The CI run kills twice in
// 24 s; PACER_SOAK_KILLS=1 (make soak) runs 12 kills in 3 minutes.
func TestSIGKILLLoopRealProcesses(t *testing.T) {
	kills, every := 2, 8*time.Second
	if os.Getenv("PACER_SOAK_KILLS") != "" {
		kills, every = 12, 15*time.Second
	}
	s := newStack(t)
	// A restart reclaims what its predecessor held if it comes within the
	// grace after the leases' expiry (after that they are settled as
	// spent: lost, never overspent). testConfig's 300 ms is shorter than a
	// pacerd takes to start at a load average of 20; 10 s is, like
	// production's default (4 s) against its 30-s leases, longer.
	s.baseConfig = strings.Replace(testConfig, "grace: 300ms", "grace: 10s", 1)
	s.campaign("c", 333_000*86_400/3)
	hosts := []string{"h0", "h1"}
	procs := make([]*proc, len(hosts))
	var allowed atomic.Int64
	var mu sync.Mutex // guards procs
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range hosts {
		procs[i] = s.start(hosts[i])
		wg.Go(func() {
			spendOn(t, func() string { mu.Lock(); defer mu.Unlock(); return procs[i].socket }, &allowed, stop)
		})
	}
	for k := range kills {
		time.Sleep(every)
		i := k % len(hosts)
		mu.Lock()
		p := procs[i]
		mu.Unlock()
		p.Cmd.Process.Kill()
		<-p.Done()
		np := s.start(hosts[i])
		mu.Lock()
		procs[i] = np
		mu.Unlock()
	}
	time.Sleep(every)
	close(stop)
	wg.Wait()
	for _, p := range procs {
		terminate(t, p)
	}
	day := time.Now().UTC().Format("2006-01-02")
	for i := range 4 { // nothing should be left to settle
		if _, err := s.ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: i}, time.Now().Add(time.Minute), 300*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}
	}
	tot := s.check("c")
	a := allowed.Load()
	if a > tot.Spent {
		t.Fatalf("overspend: clients were allowed %d, the ledger counts %d spent", a, tot.Spent)
	}
	lost := tot.Spent - a
	run := time.Duration(kills+1) * every
	t.Logf("2 pacerds, %d SIGKILLs in %v, demand 1,600,000 micros/s, the ledger released %d/s: clients allowed %d, ledger spent %d (settled as lost %d): %d micros lost = %.2f%% of what the ledger counts spent",
		kills, run, tot.Spent/int64(run.Seconds()), a, tot.Spent, tot.Lost, lost, 100*float64(lost)/float64(tot.Spent))
	if a == 0 || lost > tot.Spent/100 {
		t.Fatalf("lost %d micros of %d spent (allowed %d): want at most 1%%", lost, tot.Spent, a)
	}
}

// spendOn sends SPENDs of 5,000 micros at 160 a second (800,000 micros a
// second) to the pacerd whose socket socket returns, until stop, counting
// what it was told was allowed; a SPEND without an answer (its pacerd was
// killed) counts nothing, and the next one dials again.
func spendOn(t *testing.T, socket func() string, allowed *atomic.Int64, stop chan struct{}) {
	tick := time.NewTicker(time.Second / 160)
	defer tick.Stop()
	var c *transport.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if c == nil {
			var err error
			if c, err = transport.Dial(ctx, socket(), transport.ClientOptions{}); err != nil {
				c = nil
				continue
			}
		}
		dec, err := c.Spend(ctx, "c", 5_000, "")
		switch {
		case err != nil:
			c.Close()
			c = nil
		case dec == pacer.Allowed:
			allowed.Add(5_000)
		}
	}
}

// terminate stops p with SIGTERM (it releases its leases) and waits.
func terminate(t *testing.T, p *proc) {
	t.Helper()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("pacerd did not exit within 10s of SIGTERM")
	}
}
