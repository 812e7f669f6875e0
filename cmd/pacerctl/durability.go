package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/pacer/pacer/lease"
)

// checkDurability checks the ledger's Redis against --durability (and
// --durability-assume), as pacerd does at start, and prints the result: one
// "ok durability" line per master, or a "FAIL durability" line with the
// error that names the fix (both on stderr with --json, whose stdout stays
// the days' list). It reports whether the policy is met; err is for Redis
// failing, not for the policy failing.
func (a *app) checkDurability(ctx context.Context) (bool, error) {
	want, err := lease.ParseDurability(a.durability)
	if err != nil {
		return false, usagef("--durability: %v", err)
	}
	var assume *lease.Durability
	if a.durabilityAssume != "" {
		as, err := lease.ParseDurability(a.durabilityAssume)
		if err != nil {
			return false, usagef("--durability-assume: %v", err)
		}
		assume = &as
	}
	out := a.stdout
	if a.json {
		out = a.stderr
	}
	rep, err := lease.CheckDurability(ctx, a.rdb, want, assume)
	for _, w := range rep.Warnings {
		a.warnf("%s", w)
	}
	if errors.Is(err, lease.ErrNotDurable) {
		fmt.Fprintf(out, "FAIL durability %s: %v\n", want, err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(rep.Nodes) == 0 {
		fmt.Fprintf(out, "ok durability %s: nothing checked\n", want)
	}
	for _, n := range rep.Nodes {
		fmt.Fprintf(out, "ok durability %s: %s\n", want, n)
	}
	return true, nil
}
