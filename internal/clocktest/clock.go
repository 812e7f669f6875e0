// Package clocktest is the one settable clock the tests of every package
// share: a test moves it by hand, and everything it is handed to (daemons,
// the reconciler, broadcast receivers) reads the same instant.
package clocktest

import (
	"sync"
	"time"
)

// Manual is a clock a test moves by hand. Its zero value reads the zero
// time; it is safe for concurrent use.
type Manual struct {
	mu sync.Mutex
	t  time.Time
}

// At returns a clock reading t.
func At(t time.Time) *Manual { return &Manual{t: t} }

// Now returns the clock's instant.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, forward or back.
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Add moves the clock by d and returns the new instant.
func (c *Manual) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}
