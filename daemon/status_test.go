package daemon_test

import (
	"strconv"
	"testing"
	"time"
)

// Status says what INFO says, under INFO's names, so the systemd STATUS=
// line needs no parsing of INFO.
func TestStatusMatchesInfo(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000_000, 2)
	// A second into the day: at its first instant a day of several shards
	// has released nothing (each new shard takes up its one-bid advance at
	// the catch-up pace, docs/PACING.md), and this test is about Status.
	f.Clock.Set(midnight.Add(time.Second))
	d := f.daemon(t, "h1")
	allowed, _ := spendUntilDenied(t, d, "c", 1_000)
	if allowed == 0 {
		t.Fatal("no SPEND allowed")
	}
	st := d.Status()
	info := map[string]string{}
	for _, kv := range d.Info() {
		info[kv.Key] = kv.Value
	}
	for key, v := range map[string]int64{
		"campaigns": int64(st.Campaigns), "leases_held": int64(st.LeasesHeld),
		"spend_allowed": st.SpendAllowed, "spend_paced": st.SpendPaced,
		"spend_exhausted": st.SpendExhausted, "ledger_errors": st.LedgerErrors,
	} {
		if got := strconv.FormatInt(v, 10); info[key] != got {
			t.Errorf("Status %s = %s, INFO says %s", key, got, info[key])
		}
	}
	if st.Campaigns != 1 || st.LeasesHeld < 1 || st.SpendAllowed != allowed/1_000 || st.SpendPaced+st.SpendExhausted != 1 {
		t.Errorf("Status = %+v after %d SPENDs allowed and one denied", st, allowed/1_000)
	}
}
