package lease

import (
	"errors"
	"fmt"
)

var (
	// ErrDayNotOpen: the shard of the campaign-day does not exist yet; OpenDay it.
	ErrDayNotOpen = errors.New("lease: campaign-day not open")
	// ErrLedgerLost: the ledger says a day was opened but its shard is gone, so
	// Redis lost state (a restart without persistence, a failover to a stale
	// replica). Re-opening it would grant the day's budget a second time, so the
	// ledger refuses until an operator intervenes.
	ErrLedgerLost = errors.New("lease: ledger lost state: day marker present but shard missing; refusing to re-open")
	// ErrDayExpired: the day's keys are past their retention; it is never
	// opened again (its budget may have been spent before its keys went).
	ErrDayExpired = errors.New("lease: campaign-day past its retention; refusing to re-open")
	// ErrLeaseSettled: the lease was settled as expired before its holder released
	// it. Its whole amount was counted as spent; nothing is credited.
	ErrLeaseSettled = errors.New("lease: lease already settled as expired")
	// ErrDayClosed: the campaign-day is over and its shards closed (for the
	// report and carry-over): nothing more is granted from it.
	ErrDayClosed = errors.New("lease: campaign-day closed")
	// ErrCarryNotReady: a carry-over must wait (leases of the closed day are
	// outstanding, or the next day is not open); call again later.
	ErrCarryNotReady = errors.New("lease: carry-over not ready")
	// ErrShardFrozen: the shard lost acknowledged writes and is frozen while
	// the fleet re-asserts the leases it holds; grants resume afterwards.
	ErrShardFrozen = errors.New("lease: shard frozen after a loss of acknowledged writes; re-assert held leases")
	// ErrShardHeld: a budget cut holds the shard while it reads and applies
	// the day's shards (milliseconds); grants resume when it lands. It wraps
	// ErrShardFrozen: a caller backs off as from a frozen shard.
	ErrShardHeld = fmt.Errorf("lease: shard held while a budget cut is applied: %w", ErrShardFrozen)
	// ErrLeaseIDTaken: the lease id is another holder's: ids must be unique
	// per holder run (holder-bootID-seq); the shard answers a known id only
	// to its own holder.
	ErrLeaseIDTaken = errors.New("lease: lease id belongs to another holder")
	// ErrLedgerDiverged: the shard no longer has the history the caller saw:
	// Redis lost writes it had acknowledged (restarted from an older AOF or
	// snapshot, or failed over to a lagging replica).
	ErrLedgerDiverged = errors.New("lease: ledger lost acknowledged writes (history diverged)")
	// ErrNoAnswer: a script call got no answer (a timeout, a connection
	// lost after the call was sent): it may or may not have run. A grant
	// that ends so may have leased micros the caller does not know of: look
	// the lease up by its id (LeaseOf) and release it.
	ErrNoAnswer = errors.New("lease: no answer from the ledger (the call may have been applied)")
	// ErrRedirected: a Redis Cluster answered a call MOVED, ASK or TRYAGAIN
	// more often than the ledger follows (its slots are moving): the call
	// was not run. Call again later.
	ErrRedirected = errors.New("lease: the Redis Cluster kept redirecting the call (slots moving); it was not run")
	// ErrUnknownLease: no such lease on the shard.
	ErrUnknownLease = errors.New("lease: unknown lease")
	// ErrFenced: a reconciler call carried a fencing token older than one the
	// shard has seen: the caller was deposed.
	ErrFenced = errors.New("lease: fenced off by a newer reconciler")
	// ErrBudgetTooLarge: a budget above MaxBudgetMicros.
	ErrBudgetTooLarge = fmt.Errorf("lease: budget exceeds the maximum of %d micros", MaxBudgetMicros)
)

// UnknownCampaignError is returned for a campaign the store does not know.
type UnknownCampaignError struct{ ID string }

func (e *UnknownCampaignError) Error() string { return fmt.Sprintf("unknown campaign %q", e.ID) }
