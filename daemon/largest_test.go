package daemon_test

import (
	"testing"
	"time"
)

// One SPEND of the per-call maximum sizes the host's leases and bucket for a
// while, not for ever: ten minutes of ordinary SPENDs later, the host holds
// what its demand needs again (issue 10: "the largest amount seen is sticky").
func TestOneHugeSpendIsForgotten(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4) // 100,000 micros a second
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d := f.daemon(t, "h")
	held := func() int64 {
		b, err := d.Balance("c")
		if err != nil {
			t.Fatal(err)
		}
		return b.Tokens + b.Reserve
	}
	tick := func(seconds int) {
		for range seconds {
			f.Clock.Add(time.Second)
			d.Step(ctx)
			for range 20 {
				if _, err := d.Spend("c", 1_000, ""); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	tick(60)
	ordinary := held()
	if _, err := d.Spend("c", 5_000_000, ""); err != nil {
		t.Fatal(err)
	}
	tick(40)
	afterHuge := held()
	tick(12 * 60)
	later := held()
	t.Logf("held: %d before, %d after one SPEND of 5,000,000, %d twelve minutes later", ordinary, afterHuge, later)
	if afterHuge < 4*5_000_000/2 {
		t.Fatalf("after a SPEND of 5,000,000 the host holds only %d: it cannot allow another", afterHuge)
	}
	if later > 4*ordinary+1_000_000 {
		t.Fatalf("twelve minutes of SPENDs of 1,000 later the host still holds %d (it held %d before)", later, ordinary)
	}
}
