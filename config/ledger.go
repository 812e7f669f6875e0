package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/pacer/pacer/lease"
)

// Ledger is the ledger section of Daemon: what pacerd demands of Redis
// before it takes leases from it.
type Ledger struct {
	// Durability is the policy: fsync (default), replicas:N or none (see
	// lease.ParseDurability and configs/pacerd.example.yaml).
	Durability string `yaml:"durability"`
	// DurabilityAssume vouches for a Redis that refuses CONFIG (managed
	// Redis): the policy it is known to meet. Empty: such a Redis is refused.
	DurabilityAssume string `yaml:"durability_assume"`
	// CheckInterval is how often the durability policy and this host's clock
	// offset to Redis TIME are re-checked while leases are being taken.
	CheckInterval time.Duration `yaml:"check_interval"`
	// PackedCounters has this pacerd's grants, renewals and releases keep
	// their report counters in one field (lease.Config.PackedCounters).
	// Turn it on only once every pacerd of the fleet, and every exporter,
	// runs a release that reads it (docs/OPERATIONS.md).
	PackedCounters bool `yaml:"packed_counters"`
}

// Policy returns the parsed durability policy, and the assumed one (nil if
// none is set).
func (l Ledger) Policy() (want lease.Durability, assume *lease.Durability, err error) {
	want, err = lease.ParseDurability(l.Durability)
	if err != nil {
		return want, nil, fmt.Errorf("ledger.durability: %w", err)
	}
	if l.DurabilityAssume == "" {
		return want, nil, nil
	}
	a, err := lease.ParseDurability(l.DurabilityAssume)
	if err != nil {
		return want, nil, fmt.Errorf("ledger.durability_assume: %w", err)
	}
	switch {
	case want.Policy == lease.PolicyNone:
		return want, nil, errors.New("ledger.durability_assume: must be empty with ledger.durability: none (nothing is checked)")
	case a.Policy == lease.PolicyNone:
		return want, nil, errors.New("ledger.durability_assume: none vouches for nothing; leave it empty")
	case !a.Covers(want):
		return want, nil, fmt.Errorf("ledger.durability_assume: %s does not meet ledger.durability: %s", a, want)
	}
	return want, &a, nil
}

func (l Ledger) validate(bad func(string, ...any)) {
	if _, _, err := l.Policy(); err != nil {
		bad("%v", err)
	}
	if l.CheckInterval <= 0 {
		bad("ledger.check_interval: %v: must be positive", l.CheckInterval)
	}
}
