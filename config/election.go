package config

import "time"

// Election is the election section: the etcd session that holds the
// reconciler's role.
type Election struct {
	// TTL is the etcd session's lease, in whole seconds. The etcd client
	// renews it every TTL/3; a leader whose renewals stop reaching etcd for
	// a TTL (etcd unreachable, or the host too loaded to send them) loses
	// the role, and a dead leader keeps it that long before a standby takes
	// over. Longer: fewer terms lost to a loaded host (each new term begins
	// with a full pass), and a longer pause of settlement and rebalancing
	// after a leader dies (leases keep working meanwhile).
	TTL time.Duration `yaml:"ttl"`
}

// Bounds of election.ttl: etcd counts whole seconds, and renews at TTL/3.
const (
	minElectionTTL = 3 * time.Second
	maxElectionTTL = 5 * time.Minute
)

func (e Election) validate(bad func(string, ...any)) {
	if e.TTL < minElectionTTL || e.TTL > maxElectionTTL || e.TTL%time.Second != 0 {
		bad("election.ttl: %v: must be whole seconds from %v to %v", e.TTL, minElectionTTL, maxElectionTTL)
	}
}
