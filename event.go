package pacer

import (
	"fmt"
	"strings"
)

// Event kinds, broadcast by package broadcast (over NATS, each on subject
// "pacer.<kind>.<campaign>").
const (
	// EventExhausted: the campaign-day has no budget left to grant, says
	// the sender. Daemons read the shards sooner; only the ledger's answer
	// makes them answer -1 and stop lease calls.
	EventExhausted = "exhausted"
	// EventRevoked: paused or budget cut, says the sender (an operator).
	// Daemons re-read the campaign at once; a pause the ledger confirms
	// makes them deny and release their leases, a confirmed cut makes them
	// release their leases.
	EventRevoked = "revoked"
	// EventChanged: settings changed (curve, budget raise, resume): re-read.
	EventChanged = "changed"
	// EventLostWrites: a daemon found that the ledger lost acknowledged
	// writes on a shard of the campaign-day (Day). Daemons re-assert the
	// leases they hold on the day; the ledger ignores ones it knows.
	EventLostWrites = "lost-writes"
)

// Event is one broadcast. NATS is a fast path, never the source of truth: a
// daemon that misses an event learns the same fact from the ledger within a
// lease window.
type Event struct {
	Kind     string `json:"kind"`
	Campaign string `json:"campaign"`
	Day      string `json:"day,omitempty"`     // for exhausted: the campaign-day
	Version  int64  `json:"version,omitempty"` // campaign settings version, when known
	From     string `json:"from,omitempty"`    // the daemon or tool that sent it
	AtMillis int64  `json:"at_ms"`             // sender's clock: propagation measurements, and staleness of signed events
	// Nonce is random, set by Publish when broadcasts are signed: a
	// receiver acts on a nonce once.
	Nonce string `json:"nonce,omitempty"`
}

// Validate checks that the event is one a receiver acts on: a known kind,
// and a campaign that fits in a subject (no '.', '*', '>' or white space).
func (e Event) Validate() error {
	switch e.Kind {
	case EventExhausted, EventRevoked, EventChanged, EventLostWrites:
	default:
		return fmt.Errorf("unknown event kind %q", e.Kind)
	}
	if e.Campaign == "" || strings.ContainsAny(e.Campaign, ". *>\t\r\n") {
		return fmt.Errorf("campaign %q cannot be part of a subject", e.Campaign)
	}
	return nil
}
