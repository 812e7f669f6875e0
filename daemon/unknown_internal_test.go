package daemon

import (
	"strconv"
	"testing"
	"time"
)

// The negative cache holds at most maxEntries ids however many miss, evicts
// the oldest first, and forgets an id when its TTL ends.
func TestUnknownCampaignsBounded(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const ttl = 10 * time.Second
	u := newUnknownCampaigns(ttl, 100)
	for i := range 1000 {
		u.missed("id-"+strconv.Itoa(i), t0)
		if n := u.size(); n > 100 {
			t.Fatalf("%d ids remembered after %d misses, want at most 100", n, i+1)
		}
	}
	if ok, _ := u.unknown("id-999", t0); !ok {
		t.Error("newest id forgotten")
	}
	if ok, _ := u.unknown("id-0", t0.Add(time.Second)); ok && u.known == nil {
		t.Error("oldest id kept past the bound")
	}
	// An id missed again after its TTL gets a new TTL; evicting its old
	// ring slot must not drop the new entry.
	u = newUnknownCampaigns(ttl, 3)
	u.missed("a", t0)
	u.missed("b", t0)
	if ok, _ := u.unknown("a", t0.Add(ttl)); ok {
		t.Fatal("a still unknown after its TTL")
	}
	u.missed("a", t0.Add(ttl))
	u.missed("c", t0.Add(ttl)) // evicts a's first slot
	if ok, _ := u.unknown("a", t0.Add(ttl+time.Second)); !ok {
		t.Error("a's second entry lost when its first slot was evicted")
	}
}

// After snapshotAfter misses within a TTL, the caller is asked (once) to
// read the set of ids; until it is in, others are told to wait; with it,
// ids outside it are unknown and ids in it are not, until the TTL ends.
func TestUnknownCampaignsSnapshot(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const ttl = 10 * time.Second
	u := newUnknownCampaigns(ttl, 1000)
	fetches := 0
	for i := range snapshotAfter + 5 {
		if u.missed("x-"+strconv.Itoa(i), t0) {
			fetches++
		}
	}
	if fetches != 1 {
		t.Fatalf("%d fetches asked, want 1", fetches)
	}
	if _, wait := u.unknown("real", t0); wait == nil {
		t.Fatal("no wait while the ids are read")
	}
	u.setKnown([]string{"real"}, t0)
	if ok, wait := u.unknown("real", t0); ok || wait != nil {
		t.Errorf("real: unknown %v, wait %v", ok, wait)
	}
	if ok, _ := u.unknown("other", t0.Add(ttl-time.Millisecond)); !ok {
		t.Error("an id outside the set not answered unknown")
	}
	if ok, _ := u.unknown("other", t0.Add(ttl)); ok {
		t.Error("the set of ids used past its TTL")
	}
	// A failed read leaves ids to be read one at a time.
	u = newUnknownCampaigns(ttl, 1000)
	for i := range snapshotAfter + 1 {
		u.missed("y-"+strconv.Itoa(i), t0)
	}
	u.setKnown(nil, t0)
	if ok, wait := u.unknown("z", t0); ok || wait != nil {
		t.Errorf("after a failed read: unknown %v, wait %v", ok, wait)
	}
}
