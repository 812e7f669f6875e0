package sim

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/daemon"
)

// hostClock is one host's manual clock; the run moves it (set), never
// backwards. It is a daemon.WaitClock: a daemon's wait within a SPEND (a
// sparse campaign's fetch) lasts in simulated time, and a host's clock
// stands still while its SPEND is decided, so the fetch ends when the
// ledger answers: a run's figures do not depend on how loaded the machine
// running it is. The zero value is a clock at the Unix epoch's zero.
type hostClock struct {
	ns     atomic.Int64
	mu     sync.Mutex
	timers []*clockTimer // pending, by nothing in particular
	n      atomic.Int32  // len(timers), read without mu on every set
}

var _ daemon.WaitClock = (*hostClock)(nil)

// clockTimer is a NewTimer of hostClock: it fires once at ns.
type clockTimer struct {
	ns int64
	c  chan time.Time
}

func (c *hostClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// set moves the clock to t and fires the timers due by then.
func (c *hostClock) set(t time.Time) {
	c.ns.Store(t.UnixNano())
	if c.n.Load() > 0 {
		c.fire(t)
	}
}

// NewTimer implements daemon.WaitClock: the channel receives once the
// clock has moved d on.
func (c *hostClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := &clockTimer{ns: c.ns.Load() + int64(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.Now()
		return t.c, func() bool { return false }
	}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.n.Store(int32(len(c.timers)))
	c.mu.Unlock()
	return t.c, func() bool { return c.remove(t) }
}

// fire sends now to every timer due by now and forgets them.
func (c *hostClock) fire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.ns <= now.UnixNano() {
			t.c <- now
			continue
		}
		kept = append(kept, t)
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.n.Store(int32(len(kept)))
}

// remove stops t; it reports whether t was still pending.
func (c *hostClock) remove(t *clockTimer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.timers {
		if p == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.n.Store(int32(len(c.timers)))
			return true
		}
	}
	return false
}
