package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

var spentT0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func openTestSpentMap(t *testing.T, path string) *spentMap {
	t.Helper()
	m, err := openSpentMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recorded returns a new bucket recording into m's slot for k.
func recorded(t *testing.T, m *spentMap, k spentKey) *bucket.Bucket {
	t.Helper()
	b := bucket.New(1_000_000)
	if !m.record(b, k, spentT0) {
		t.Fatalf("bucket of %+v does not record", k)
	}
	return b
}

func grantAt(t *testing.T, b *bucket.Bucket, now time.Time, id string, amount int64) {
	t.Helper()
	if err := b.AddGrant(now, bucket.Grant{ID: id, Amount: amount, Start: now.Add(-time.Second), End: now.Add(time.Minute), DripEnd: now}); err != nil {
		t.Fatal(err)
	}
}

// The spent map keeps a slot per run's campaign-day: what the day's
// buckets (every bucket of it, one after the other) let SPENDs take net of
// refunds, what their closed feeds spent, and each lease's entry until its
// release is journaled. The process that wrote it closes its mapping as a
// SIGKILL would leave it (nothing flushed, nothing released): the next
// opening reads every slot back, and a slot freed is gone.
func TestSpentMapSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.spent")
	m := openTestSpentMap(t, path)
	a := spentKey{boot: "b1", campaign: "c", day: "2026-11-21"}
	other := spentKey{boot: "b1", campaign: "d", day: "2026-11-21"}
	b := recorded(t, m, a)
	recorded(t, m, other)
	grantAt(t, b, spentT0, "h-b1-1", 1_000)
	grantAt(t, b, spentT0, "h-b1-2", 2_000)
	if !b.Spend(spentT0, 700) || b.Refund(spentT0, 100) != 100 {
		t.Fatal("spend or refund refused")
	}
	cl, ok := b.CloseFeed(spentT0, "h-b1-1")
	if !ok {
		t.Fatal("no feed h-b1-1")
	}
	// A second bucket of the same day (the campaign dropped and loaded
	// again) counts on in the same slot.
	b2 := recorded(t, m, a)
	grantAt(t, b2, spentT0, "h-b1-3", 500)
	if !b2.Spend(spentT0, 400) {
		t.Fatal("spend refused")
	}
	want := spentSnapshot{net: 1_000, closed: cl.Amount - cl.Unused, entries: map[uint64]spentEntry{
		1: {1_000, cl.Unused}, 2: {2_000, -1}, 3: {500, -1}}}
	checkSnapshot(t, m, a, want)
	m.released(a, 1) // its close line is journaled
	delete(want.entries, 1)
	checkSnapshot(t, m, a, want)
	if _, err := openSpentMap(path, nil); err == nil {
		t.Fatal("a second opening of a map in use succeeded")
	}

	m.close() // SIGKILL: the pages stay with the kernel
	m = openTestSpentMap(t, path)
	checkSnapshot(t, m, a, want)
	checkSnapshot(t, m, other, spentSnapshot{entries: map[uint64]spentEntry{}})
	m.dropUnused(func(k spentKey) bool { return k == a })
	m.close()
	m = openTestSpentMap(t, path)
	defer m.close()
	checkSnapshot(t, m, a, want)
	if _, ok := m.snapshot(other); ok {
		t.Fatal("a freed slot is still there")
	}
	// The freed slot is taken again, from zero.
	recorded(t, m, spentKey{boot: "b2", campaign: "e", day: "2026-11-22"})
	checkSnapshot(t, m, spentKey{boot: "b2", campaign: "e", day: "2026-11-22"}, spentSnapshot{entries: map[uint64]spentEntry{}})
}

func checkSnapshot(t *testing.T, m *spentMap, k spentKey, want spentSnapshot) {
	t.Helper()
	got, ok := m.snapshot(k)
	if !ok {
		t.Fatalf("no slot for %+v", k)
	}
	if got.net != want.net || got.closed != want.closed || got.poisoned != want.poisoned || fmt.Sprint(got.entries) != fmt.Sprint(want.entries) {
		t.Fatalf("slot %+v: %+v; want %+v", k, got, want)
	}
}

// A map written under another machine boot (the machine crashed or
// rebooted: its pages may never have reached the disk) is emptied.
func TestSpentMapFromAnotherBootIsEmptied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.spent")
	m := openTestSpentMap(t, path)
	k := spentKey{boot: "b1", campaign: "c", day: "2026-11-21"}
	recorded(t, m, k)
	m.close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	boot := []byte("00000000-0000-0000-0000-000000000000")
	if _, err := f.WriteAt(append([]byte{byte(len(boot))}, boot...), hdrBoot); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m = openTestSpentMap(t, path)
	defer m.close()
	if _, ok := m.snapshot(k); ok {
		t.Fatal("a slot written under another boot is trusted")
	}
}

// A slot keeps its entries for the leases whose feed closed until their
// release is journaled; with no entry free, the longest-closed lease's is
// given up (that lease is then reclaimed by the undripped rule); with
// every entry open (or a lease id without a sequence number), the slot is
// no longer trusted. A key that does not fit has no slot.
func TestSpentMapEntriesRunOut(t *testing.T) {
	m := openTestSpentMap(t, filepath.Join(t.TempDir(), "leases.spent"))
	defer m.close()
	k := spentKey{boot: "b1", campaign: "c", day: "2026-11-21"}
	b := recorded(t, m, k)
	for i := 1; i <= spentEntries+2; i++ {
		id := fmt.Sprintf("h-b1-%s", strings.ToLower(fmt.Sprintf("%x", i)))
		grantAt(t, b, spentT0, id, 100)
		if _, ok := b.CloseFeed(spentT0, id); !ok {
			t.Fatal("no feed", id)
		}
	}
	snap, _ := m.snapshot(k)
	if len(snap.entries) != spentEntries || snap.poisoned {
		t.Fatalf("%d entries (poisoned %v); want %d", len(snap.entries), snap.poisoned, spentEntries)
	}
	if _, ok := snap.entries[1]; ok {
		t.Fatal("the longest-closed lease's entry was kept over a newer one")
	}
	s := m.users[m.index[k]]
	for i := range spentEntries {
		s.FeedOpened(fmt.Sprintf("h-b1-%d", 1000+i), 10)
	}
	if snap, _ := m.snapshot(k); snap.poisoned {
		t.Fatal("poisoned with entries still to give up")
	}
	s.FeedOpened("h-b1-zzzzz", 10)
	if snap, _ := m.snapshot(k); !snap.poisoned {
		t.Fatal("a slot whose entries are all open took one more lease without being marked untrusted")
	}
	if m.record(bucket.New(1), spentKey{boot: "b1", campaign: strings.Repeat("c", 136), day: "2026-11-21"}, spentT0) {
		t.Fatal("a key too long for a slot got one")
	}
}

// groupShares gives back, per campaign-day of a dead run, what its leases
// held unspent by the slot, and never more: with no slot, an untrusted
// one, or one that is not this journal's, each lease's undripped part; a
// lease with no entry, its undripped part; a slot read between a feed's
// close and its count (a process killed in between) gives back less than
// the truth.
func TestGroupSharesNeverExceedWhatWasHeld(t *testing.T) {
	k := lease.ShardKey{Campaign: "c", Day: "2026-11-21"}
	mk := func(seq int, amount int64) JournalLease {
		return JournalLease{ID: fmt.Sprintf("h-b1-%d", seq), Key: k, Amount: amount,
			DripStart: spentT0.Add(-10 * time.Second), DripEnd: spentT0.Add(10 * time.Second)}
	}
	g := []JournalLease{mk(1, 1_000), mk(2, 2_000), mk(3, 4_000)}
	at := spentT0 // half of each dripped
	undripped := []reclaimShare{{500, false}, {1_000, false}, {2_000, false}}
	// Lease 1 closed with 300 unused; 2 and 3 open; the buckets let SPENDs
	// take 2,900 net, 700 of them from lease 1: 2 and 3 hold 6,000 − 2,200,
	// shared out as what each had not dripped (1,000 and 2,000), then the
	// rest to the first.
	slot := spentSnapshot{net: 2_900, closed: 700, entries: map[uint64]spentEntry{1: {1_000, 300}, 2: {2_000, -1}, 3: {4_000, -1}}}
	for _, c := range []struct {
		name string
		snap spentSnapshot
		have bool
		want []reclaimShare
	}{
		{"exact", slot, true, []reclaimShare{{300, true}, {1_800, true}, {2_000, true}}},
		{"no slot", spentSnapshot{}, false, undripped},
		{"untrusted", withPoison(slot), true, undripped},
		{"not this journal's", withEntry(slot, 3, spentEntry{5_000, -1}), true, undripped},
		{"no entry for lease 1", withoutEntry(slot, 1), true, []reclaimShare{{500, false}, {1_800, true}, {2_000, true}}},
		// Killed after lease 1's entry said closed, before closed counted
		// its 700: 700 less than the truth.
		{"torn close", withClosed(slot, 0), true, []reclaimShare{{300, true}, {1_100, true}, {2_000, true}}},
		// Nothing spent from the open leases: all of them back.
		{"open leases unspent", withNet(slot, 700), true, []reclaimShare{{300, true}, {2_000, true}, {4_000, true}}},
		{"net below closed", withNet(slot, 600), true, undripped},
	} {
		got := groupShares(c.snap, c.have, g, at)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
		for i, sh := range got {
			if sh.unused < 0 || sh.unused > g[i].Amount {
				t.Errorf("%s: lease %d gives back %d of %d", c.name, i+1, sh.unused, g[i].Amount)
			}
		}
	}
}

func withPoison(s spentSnapshot) spentSnapshot          { s.poisoned = true; return s }
func withClosed(s spentSnapshot, n int64) spentSnapshot { s.closed = n; return s }
func withNet(s spentSnapshot, n int64) spentSnapshot    { s.net = n; return s }
func withEntry(s spentSnapshot, seq uint64, e spentEntry) spentSnapshot {
	entries := map[uint64]spentEntry{}
	for k, v := range s.entries {
		entries[k] = v
	}
	entries[seq] = e
	s.entries = entries
	return s
}
func withoutEntry(s spentSnapshot, seq uint64) spentSnapshot {
	s = withEntry(s, seq, spentEntry{})
	delete(s.entries, seq)
	return s
}

// A campaign-day's buckets each count in a word of the slot; a bucket that
// stopped recording (its day dropped: it is idle) gives its word up to the
// next one, its count folded into the slot's base. A slot whose words are
// all held by buckets with a feed open takes no more: it is no longer
// trusted.
func TestSpentMapBucketsOfADay(t *testing.T) {
	m := openTestSpentMap(t, filepath.Join(t.TempDir(), "leases.spent"))
	defer m.close()
	k := spentKey{boot: "b1", campaign: "c", day: "2026-11-21"}
	var net int64
	for i := range 3 * spentInstances { // dropped one after the other: the words are reused
		b := recorded(t, m, k)
		id := fmt.Sprintf("h-b1-%d", i+1)
		grantAt(t, b, spentT0, id, 1_000)
		if !b.Spend(spentT0, 100+int64(i)) {
			t.Fatal("spend refused")
		}
		net += 100 + int64(i)
		b.Revoke(spentT0)
	}
	checkSnapshot(t, m, k, spentSnapshot{net: net, closed: net, entries: snapEntries(t, m, k)})
	for i := range spentInstances { // all at once, each with a feed open
		b := recorded(t, m, k)
		grantAt(t, b, spentT0, fmt.Sprintf("h-b1-%d", 100+i), 10)
	}
	if m.record(bucket.New(1), k, spentT0) {
		t.Fatal("a bucket recorded with every word held by a bucket with a feed open")
	}
	if snap, _ := m.snapshot(k); !snap.poisoned {
		t.Fatal("a bucket of the day does not record, and the slot is still trusted")
	}
}

func snapEntries(t *testing.T, m *spentMap, k spentKey) map[uint64]spentEntry {
	t.Helper()
	snap, _ := m.snapshot(k)
	return snap.entries
}
