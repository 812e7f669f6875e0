package daemon_test

import (
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// countingPublisher records the events a daemon broadcasts (and delivers
// none, as if NATS were slow): every daemon finds the exhaustion on its own.
type countingPublisher struct {
	mu     sync.Mutex
	events []pacer.Event
}

var _ daemon.Publisher = (*countingPublisher)(nil)

func (p *countingPublisher) Publish(e pacer.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
	return nil
}

// Issue 13: a campaign-day exhausted by three daemons at once is broadcast
// once by the fleet, not once per daemon (H daemons x H deliveries).
func TestExhaustionIsBroadcastOncePerDay(t *testing.T) {
	f := newFixture(t)
	base := morningCampaign(t, f, "c", 300_000, 2)
	f.Clock.Set(midnight.Add(13 * time.Hour))
	pub := &countingPublisher{}
	var ds []*daemon.Daemon
	for _, h := range []string{"a", "b", "c"} {
		cfg := base
		cfg.Holder, cfg.Clock, cfg.Publisher = h, f.Clock, pub
		d, err := daemon.New(f.Ledger, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(ctx) })
		ds = append(ds, d)
	}
	exhausted := 0
	for i := 0; i < 300 && exhausted < len(ds); i++ {
		f.Clock.Add(time.Second)
		exhausted = 0
		for _, d := range ds {
			d.Step(ctx)
			spendAttempts(t, d, "c", 1_000, 50)
			if dec, _ := d.Spend("c", 1_000, ""); dec == pacer.Exhausted {
				exhausted++
			}
		}
	}
	if exhausted < len(ds) {
		t.Fatalf("only %d of %d daemons found the day exhausted", exhausted, len(ds))
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	n := 0
	for _, e := range pub.events {
		if e.Kind == pacer.EventExhausted {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the fleet broadcast the exhaustion %d times; want once", n)
	}
}
