package daemon

import (
	"sync"
	"time"
)

// unknownCampaigns answers "unknown campaign" without a ledger read, so that
// a client sending ids the ledger does not know (a bug, or an attack with
// random ids) costs the ledger a bounded number of reads:
//
//   - An id the ledger said it does not know is remembered for ttl: at most
//     one read per unknown id per ttl for the whole daemon (loads of one id
//     are also deduplicated while in flight).
//   - When more than snapshotAfter different ids missed within one ttl, the
//     daemon reads the ledger's set of campaign ids once (one SMEMBERS) and,
//     for ttl, answers every id outside it as unknown without a read: a
//     flood of distinct random ids then costs about snapshotAfter + 1 reads
//     per ttl, not one per id.
//
// Either way a campaign created meanwhile becomes usable within ttl, as
// with the negative cache alone. Memory is bounded: at most maxEntries ids,
// evicted oldest first (which, with one ttl for all, are also the first to
// expire), plus the snapshot, whose size is the number of real campaigns.
// Every operation is O(1) (the snapshot's build is O(campaigns), once per
// ttl at most). Safe for concurrent use.
type unknownCampaigns struct {
	ttl        time.Duration
	maxEntries int

	mu    sync.Mutex
	until map[string]time.Time // id -> end of its ttl
	ring  []unknownEntry       // entries in insertion order; ring[head] is the oldest
	head  int

	// misses counts ledger misses since missWindow began.
	misses     int
	missWindow time.Time
	// known is the ledger's campaign ids as of knownAt; nil when there
	// is none or it has expired. fetching is true while one is read.
	known   map[string]struct{}
	knownAt time.Time
	// fetched is closed when the read of the ids in flight ends; nil when
	// none is.
	fetched chan struct{}
}

type unknownEntry struct {
	id    string
	until time.Time
}

// snapshotAfter is how many ledger misses within one ttl make the daemon read
// the set of campaign ids instead of one id at a time.
const snapshotAfter = 16

// defaultUnknownEntries bounds the negative cache: about 10 MB with ids of
// the longest allowed length (map entry, ring slot and the id itself).
const defaultUnknownEntries = 50_000

func newUnknownCampaigns(ttl time.Duration, maxEntries int) *unknownCampaigns {
	return &unknownCampaigns{ttl: ttl, maxEntries: maxEntries, until: make(map[string]time.Time)}
}

// unknown reports whether id is known not to exist as of now, from the
// negative cache or from a fresh snapshot of the campaign ids. While the
// ids are being read (many misses just happened), it returns a channel to
// wait on before asking again, rather than let each id cost a read.
func (u *unknownCampaigns) unknown(id string, now time.Time) (bool, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if t, ok := u.until[id]; ok {
		if now.Before(t) {
			return true, nil
		}
		delete(u.until, id) // its ring slot is dropped when reached
	}
	if u.known != nil {
		if now.Sub(u.knownAt) >= u.ttl {
			u.known = nil
		} else if _, ok := u.known[id]; !ok {
			return true, nil
		}
	}
	if u.fetched != nil {
		return false, u.fetched
	}
	return false, nil
}

// missed records that the ledger does not know id. It reports whether the
// caller should now read the set of campaign ids and hand it to setKnown.
func (u *unknownCampaigns) missed(id string, now time.Time) (fetch bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := unknownEntry{id: id, until: now.Add(u.ttl)}
	if len(u.ring) < u.maxEntries {
		u.ring = append(u.ring, e)
	} else {
		// Full: evict the oldest entry, unless its id was added again
		// since (then the map holds the later entry's ttl).
		if old := u.ring[u.head]; u.until[old.id].Equal(old.until) {
			delete(u.until, old.id)
		}
		u.ring[u.head] = e
		u.head = (u.head + 1) % len(u.ring)
	}
	u.until[id] = e.until
	if now.Sub(u.missWindow) >= u.ttl {
		u.missWindow, u.misses = now, 0
	}
	u.misses++
	if u.misses > snapshotAfter && u.known == nil && u.fetched == nil {
		u.fetched = make(chan struct{})
		return true
	}
	return false
}

// setKnown installs the ledger's campaign ids read at at; ids nil (a failed
// read) leaves the daemon reading ids one at a time.
func (u *unknownCampaigns) setKnown(ids []string, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	close(u.fetched)
	u.fetched = nil
	if ids == nil {
		return
	}
	known := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		known[id] = struct{}{}
	}
	u.known, u.knownAt = known, at
}

// size returns the number of ids remembered, for tests.
func (u *unknownCampaigns) size() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.until)
}
