package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

func TestJournalRemembersOpenLeases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "leases.journal")
	j, left, err := OpenJournal(path, nil)
	if err != nil || len(left) != 0 {
		t.Fatalf("new journal: %v, %v", left, err)
	}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: 3}
	a := JournalLease{ID: "h-1", Key: k, Amount: 1_000_000, DripStart: t0, DripEnd: t0.Add(29 * time.Second), Expiry: t0.Add(30 * time.Second)}
	b := a
	b.ID = "h-2"
	for _, jl := range []JournalLease{a, b} {
		if err := j.Granted(jl); err != nil {
			t.Fatal(err)
		}
	}
	j.Closed("h-1")
	j.Closed("nope")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves a partial line: it is ignored.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("G h-3 c 2026-11-21 0 5")
	f.Close()

	j, left, err = OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(left) != 1 || !sameLease(left[0], b) {
		t.Fatalf("left open: %+v; want only %+v", left, b)
	}
	// Compacted: the file now holds only the open lease, and the run's
	// totals on the shard-day less what the open lease counts (granted
	// 1,000,000 by h-1, which gave nothing back).
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "R h c 2026-11-21 3 1000000 0\n"+grantLine(b) {
		t.Fatalf("compacted journal %q, %v", data, err)
	}
}

// Unspendable is exactly what the bucket has not dripped: never more, so a
// reclaim never gives back micros that could have been spent.
func TestUnspendableMatchesTheBucket(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	jl := JournalLease{ID: "L", Amount: 999_999_937, DripStart: t0, DripEnd: t0.Add(29*time.Second + 7*time.Nanosecond)}
	b := bucket.New(jl.Amount) // capacity never bites: every dripped micro stays spendable
	if err := b.AddGrant(t0, bucket.Grant{ID: jl.ID, Amount: jl.Amount, Start: jl.DripStart, End: jl.DripEnd}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{-time.Second, 0, 1, 333 * time.Millisecond, 7*time.Second + 13, 28*time.Second + 999_999_999, 29*time.Second + 7, time.Minute} {
		now := t0.Add(at)
		st := b.Stats(now)
		// At the drip's end the bucket closes the feed (its rest goes back).
		if got, want := jl.Unspendable(now), jl.Amount-st.Tokens; at >= 0 && now.Before(jl.DripEnd) && got != want {
			t.Errorf("at +%v: unspendable %d, bucket has %d undripped", at, got, want)
		}
	}
	if jl.Unspendable(t0.Add(-time.Second)) != jl.Amount || jl.Unspendable(t0.Add(time.Hour)) != 0 {
		t.Error("before the drip all of it, after the drip none of it")
	}
}

func sameLease(a, b JournalLease) bool {
	return a.ID == b.ID && a.Key == b.Key && a.Amount == b.Amount && a.DripStart.Equal(b.DripStart) &&
		a.DripEnd.Equal(b.DripEnd) && a.Expiry.Equal(b.Expiry)
}
