package main

import (
	"time"

	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
)

// durabilityPolicy returns the ledger's durability policy from the config,
// with the WAIT timeout of replicas:N well inside one ledger call's timeout.
func durabilityPolicy(cfg config.Daemon) (want lease.Durability, assume *lease.Durability, err error) {
	want, assume, err = cfg.Ledger.Policy()
	if err != nil {
		return want, nil, err
	}
	want.WaitTimeout = min(time.Second, cfg.LedgerTimeout/2)
	return want, assume, nil
}
