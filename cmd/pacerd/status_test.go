package main

import (
	"testing"

	"github.com/pacer/pacer/daemon"
)

func TestStatusLine(t *testing.T) {
	got := statusLine(daemon.Status{Campaigns: 2, LeasesHeld: 3, SpendAllowed: 40, SpendPaced: 5, SpendExhausted: 6, LedgerErrors: 7})
	want := "serving: campaigns=2 leases_held=3 spend_allowed=40 spend_paced=5 ledger_errors=7 "
	if got != want {
		t.Errorf("statusLine = %q, want %q", got, want)
	}
}
