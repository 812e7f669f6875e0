package transport

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer"
)

// waitingSpender is a fakeSpender that is a WaitingSpender: once wait is
// set, a SPEND of campaign "rare" would wait (as pacerd's sparse campaigns
// fetch their leases): SpendAtNoWait defers it, and SpendAt blocks until
// release, as fakeSpender's "slow" does.
type waitingSpender struct {
	*fakeSpender
	wait     atomic.Bool
	deferred atomic.Int64 // SPENDs SpendAtNoWait deferred
}

var _ WaitingSpender = (*waitingSpender)(nil)

func (w *waitingSpender) Now() time.Time { return time.Now() }

func (w *waitingSpender) SpendAt(now time.Time, id pacer.CampaignID, amount pacer.Micros, auctionID string) (pacer.Decision, time.Time, error) {
	if id == "rare" && w.wait.Load() {
		w.entered <- struct{}{}
		<-w.release
	}
	if id == "rare" {
		id = "demo2"
	}
	dec, err := w.fakeSpender.Spend(id, amount, auctionID)
	return dec, now, err
}

func (w *waitingSpender) SpendAtNoWait(now time.Time, id pacer.CampaignID, amount pacer.Micros, auctionID string) (pacer.Decision, time.Time, error) {
	if id == "rare" && w.wait.Load() {
		w.deferred.Add(1)
		return pacer.Paced, now, pacer.ErrWouldWait
	}
	return w.SpendAt(now, id, amount, auctionID)
}

// TestSpendThatWouldWaitIsHandedOff: a SPEND the Spender says would wait
// (a sparse campaign fetching its lease) is answered from a goroutine: other
// connections are answered meanwhile, and the waiting connection's replies,
// pipelined behind it, come in order once it is decided. The event loops
// ask SpendAtNoWait and hand it off; the goroutine server calls SpendAt.
func TestSpendThatWouldWaitIsHandedOff(t *testing.T) {
	sp := &waitingSpender{fakeSpender: newFakeSpender()}
	sp.tokens["demo"], sp.tokens["demo2"] = 1<<40, 1<<40
	ts := startServer(t, sp, ServerConfig{})
	a := dialRaw(t, ts.path)
	// Both campaigns answered once on a, so the loop decides them itself.
	for _, id := range []string{"rare", "demo"} {
		if got := a.do(t, resp("SPEND", id, "1")); got != ":1\r\n" {
			t.Fatalf("first SPEND %s = %q", id, got)
		}
	}
	sp.wait.Store(true)
	released := false
	defer func() { // on failure too, so the server can close
		if !released {
			close(sp.release)
		}
	}()
	io.WriteString(a, resp("SPEND", "demo", "1")+resp("SPEND", "rare", "7")+resp("SPEND", "demo", "1")+resp("PING"))
	<-sp.entered
	b := dialRaw(t, ts.path)
	for i := range 3 {
		if got := b.do(t, resp("SPEND", "demo", "1")); got != ":1\r\n" {
			t.Fatalf("SPEND %d on another connection while a SPEND waits: %q", i, got)
		}
	}
	close(sp.release)
	released = true
	for i, want := range []string{":1\r\n", ":1\r\n", ":1\r\n", "+PONG\r\n"} {
		if got, err := a.reply(); got != want || err != nil {
			t.Fatalf("reply %d on the waiting connection = %q, %v; want %q", i, got, err, want)
		}
	}
	if got := a.do(t, resp("SPEND", "demo", "1")); got != ":1\r\n" {
		t.Fatalf("SPEND after the wait = %q", got)
	}
	deferred := sp.deferred.Load()
	switch testKind() {
	case Goroutines:
		if deferred != 0 {
			t.Fatalf("the goroutine server deferred %d SPENDs; it may wait, and should call SpendAt", deferred)
		}
	default:
		if deferred != 1 {
			t.Fatalf("the event loop deferred %d SPENDs; want the one that would wait", deferred)
		}
	}
	sp.mu.Lock()
	got := sp.tokens["demo2"]
	sp.mu.Unlock()
	if got != 1<<40-1-7 {
		t.Fatalf("rare charged %d; want 1 and 7, once each", 1<<40-got)
	}
}
