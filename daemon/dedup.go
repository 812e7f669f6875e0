package daemon

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/transport"
)

// dedup remembers the answers given to SPENDs that carried an auction id, so
// a retried SPEND gets the first answer and is not charged twice, and a REFUND
// with that id cannot return more than the auction spent. Entries live between
// window and 2*window: two generations of maps, the older dropped whole, so
// expiry costs nothing per entry.
type dedup struct {
	mu       sync.Mutex
	window   time.Duration
	cur      map[string]*auction
	prev     map[string]*auction
	curStart time.Time

	replayedAllows atomic.Int64
}

type auction struct {
	at       time.Time
	decision transport.Decision
	amount   int64
	refunded int64
}

// maxAuctions bounds one generation, so a flood of ids cannot exhaust memory;
// past it the generation rotates early, and retries older than that are
// charged again (the bidder sees a fresh answer, never a double refund).
const maxAuctions = 2_000_000

func (d *dedup) rotate(now time.Time) {
	if d.cur == nil {
		d.cur, d.curStart = map[string]*auction{}, now
	}
	if now.Sub(d.curStart) >= d.window || len(d.cur) >= maxAuctions {
		d.prev, d.cur, d.curStart = d.cur, map[string]*auction{}, now
	}
}

func (d *dedup) lookup(now time.Time, id string) *auction {
	if a, ok := d.cur[id]; ok && now.Sub(a.at) < d.window {
		return a
	}
	if a, ok := d.prev[id]; ok && now.Sub(a.at) < d.window {
		return a
	}
	return nil
}

// do answers a SPEND with auction id: the remembered answer, or decide's.
func (d *dedup) do(now time.Time, id string, amount int64, decide func() transport.Decision) transport.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rotate(now)
	a := d.lookup(now, id)
	switch {
	case a == nil:
	case a.decision != transport.Allowed:
		return a.decision
	case a.refunded == 0 && amount <= a.amount:
		d.replayedAllows.Add(1) // a retry: answered "allowed" without a second charge
		return a.decision
	}
	// New, or refunded (in part or whole), or asking for more than was
	// charged: replaying ":1" would hand out money never charged, so decide
	// (and charge) again.
	dec := decide()
	if a != nil {
		if dec == transport.Allowed {
			a.amount += amount
		}
		return dec
	}
	d.cur[id] = &auction{at: now, decision: dec, amount: amount}
	return dec
}

var errAuctionUnknown = errors.New("auction id not seen as allowed in the last 10 minutes")

// errDayClosed: a refund for an auction allowed on a campaign-day that has
// closed. That day's spend is counted (its leases settled or settling); its
// budget cannot come back, and crediting the refund to today would let today
// spend more than its budget.
var errDayClosed = errors.New("allowed on a campaign-day that has closed; nothing credited")

// check reports why a refund of amount micros for auction id cannot be
// taken back into the campaign-day starting at dayStart (in loc), or nil.
func (d *dedup) check(now time.Time, id string, amount int64, dayStart time.Time, loc *time.Location) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.lookup(now, id)
	if a == nil || a.decision != transport.Allowed {
		return fmt.Errorf("auction %q: %w", id, errAuctionUnknown)
	}
	if a.at.Before(dayStart) {
		return fmt.Errorf("auction %q was allowed on %s, a campaign-day that has closed; nothing credited: %w",
			id, bucket.DayOf(a.at, loc).Key, errDayClosed)
	}
	if left := a.amount - a.refunded; amount > left {
		return fmt.Errorf("auction %q: refund of %d micros exceeds the %d it spent (net of refunds)", id, amount, left)
	}
	return nil
}

// refund records a refund that check accepted. The campaign's refundMu
// serialises the two.
func (d *dedup) refund(now time.Time, id string, amount int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.lookup(now, id); a != nil {
		a.refunded += amount
	}
}
