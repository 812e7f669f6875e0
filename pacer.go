// Package pacer holds the domain words every part of pacer speaks: the
// CampaignID a bidder names and the Micros it spends, the Decision a SPEND
// gets, a campaign's Balance, and the Event a daemon or an operator
// broadcasts to the fleet. It imports nothing but the standard
// library, so the wire (transport), the fan-out (broadcast), the daemon, the
// reconciler, the simulator and the commands share these types without
// importing each other. The parts themselves are packages of their own:
// bucket, lease, daemon, transport, broadcast, reconcile, config and sim.
package pacer

import (
	"errors"
	"fmt"
)

// ErrWouldWait is what a Spender's SpendAtNoWait returns, deciding nothing,
// for a SPEND whose answer would wait on the ledger (a campaign to load, or
// a sparse campaign's lease to fetch): a server that must not wait, such as
// an event loop, asks again from a goroutine of its own with SpendAt.
var ErrWouldWait = errors.New("the answer would wait on the ledger")

// Decision is the answer to a SPEND. Its values are the integers sent on the
// wire, so a bidder in any language can branch on the reply directly.
type Decision int

const (
	// Exhausted: the campaign has no budget left for the day.
	Exhausted Decision = -1
	// Paced: the campaign has budget, but spending now would run ahead of
	// its pacing curve; the bidder should skip this auction.
	Paced Decision = 0
	// Allowed: the amount has been taken from the campaign's bucket.
	Allowed Decision = 1
)

func (d Decision) String() string {
	switch d {
	case Exhausted:
		return "exhausted"
	case Paced:
		return "paced"
	case Allowed:
		return "allowed"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// InfoField is one "key:value" line of a daemon's INFO reply. Keys must not
// contain ':' and neither may contain line breaks, as in Redis INFO.
type InfoField struct {
	Key, Value string
}

// Balance is a campaign's local state as the daemon sees it.
type Balance struct {
	Tokens        int64 // micros spendable now
	Reserve       int64 // micros leased but not yet dripped into the bucket
	PacePerSecond int64 // micros per second the bucket refills at
	State         string
}

// CampaignID names a campaign as bidders, operators and the ledger do. The
// socket checks one at its edge (length, no control characters); the ledger
// knows which ids exist and what characters its keys allow.
type CampaignID string

// Micros is an amount of money in millionths of the currency unit: the one
// unit of budgets, SPENDs, REFUNDs and leases, so that sums are exact.
type Micros int64
