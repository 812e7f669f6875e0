package daemon

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
)

// auctionMemory remembers, for the whole daemon, the auction ids of SPENDs it
// allowed, so that a retried SPEND is answered ":1" without a second charge
// and a REFUND with that id can return no more than the auction was charged,
// and only to the campaign-day it was charged on.
//
// Only allowed answers are remembered: a retry of a paced or exhausted SPEND
// simply decides again (and, if allowed then, is charged then). A refunded
// id is decided and charged again on a repeated SPEND: replaying its ":1"
// would hand out money never charged.
//
// Memory is one bound for the daemon, in bytes, whatever the number of
// campaigns: ids are kept as fixed-size 128-bit hashes in rings of
// fixed-size records (no pointers, so the garbage collector never scans
// them), split into stripes by hash so that SPENDs of different campaigns
// rarely share a lock. Each ring forgets its oldest record first: records
// older than the window, and, when the bound is reached, the oldest ones
// even if younger. The window actually kept is AuctionStats.Window (the
// pacer_auction_ids_window_seconds gauge); refund errors quote it.
//
// Why 128 bits: a collision would answer a new auction with another one's
// ":1", for free. With a 64-bit hash and 1.25M ids remembered, a new id
// collides with probability 1.25e6/2^64 ≈ 7e-14; at 180k SPENDs a second
// that is about one free ":1" every 2.5 years, per daemon of the fleet. With
// 128 bits it is 4e-33 per SPEND: never. The hash is seeded per process
// (hash/maphash), so ids cannot be crafted to collide.
type auctionMemory struct {
	window     int64 // nanoseconds
	seedLo     maphash.Seed
	seedHi     maphash.Seed
	stripeBits int
	stripes    []auctionStripe
}

// auctionKey is the 128-bit hash of a campaign's auction id; lo is never 0,
// so the zero key marks a record that is no longer indexed.
type auctionKey struct{ lo, hi uint64 }

// auctionRecord is one remembered auction: 40 bytes.
type auctionRecord struct {
	key     auctionKey
	at      int64 // unix nanos of the SPEND that was allowed (its last charge)
	charged int64 // micros charged for the id on the campaign-day of at
	left    int64 // charged minus what REFUNDs gave back
}

const (
	recordBytes = 40 // unsafe.Sizeof(auctionRecord{})
	indexBytes  = 8  // one slot of the index
	// stripeBytes is the memory one stripe aims at; smaller bounds get fewer
	// stripes (down to one), so that each stripe keeps a useful window.
	stripeBytes = 1 << 20
	maxStripes  = 64
	// MinDedupMemoryBytes and MaxDedupMemoryBytes bound what Config accepts.
	MinDedupMemoryBytes = 4 << 10
	MaxDedupMemoryBytes = 1 << 40
)

// auctionStripe is one ring of records and its hash index. The ring holds
// n records from head, oldest first; index is an open-addressing table with
// linear probing, at most 3/4 full, whose slots hold a ring position + 1 in
// their low 32 bits (0: empty) and the key's home bits in their high 32: a
// probe compares keys in the ring only when those match, and deletion finds
// each entry's home without touching the ring (a cache miss each, at a
// million records).
type auctionStripe struct {
	mu         sync.Mutex
	ring       []auctionRecord
	head, n    int
	index      []uint64
	maxRecords int
	maxIndex   int
	// forgotAt is the at of the newest record dropped for room, not age:
	// allowed SPENDs after it are all remembered.
	forgotAt int64
	_        [64]byte // keep stripes' locks on separate cache lines
}

func newAuctionMemory(window time.Duration, memoryBytes int64) *auctionMemory {
	stripes := 1
	for stripes < maxStripes && int64(stripes*2)*stripeBytes <= memoryBytes {
		stripes *= 2
	}
	m := &auctionMemory{
		window:     int64(window),
		seedLo:     maphash.MakeSeed(),
		seedHi:     maphash.MakeSeed(),
		stripeBits: bits.TrailingZeros(uint(stripes)),
		stripes:    make([]auctionStripe, stripes),
	}
	per := memoryBytes / int64(stripes)
	// The largest index (a power of two) whose table and its ring at half
	// load fit; the ring then takes what the index leaves, up to 3/4 load.
	idx := 2
	for int64(idx*2)*(indexBytes+recordBytes/2) <= per {
		idx *= 2
	}
	// Index slots hold 32 bits of position and of home: at 1 TiB, the most
	// Config accepts, per stripe is 16 GiB, idx 2^29 and positions below it.
	maxRecords := int(min((per-int64(idx)*indexBytes)/recordBytes, int64(idx*3/4)))
	for i := range m.stripes {
		m.stripes[i].maxRecords = max(maxRecords, 1)
		m.stripes[i].maxIndex = idx
	}
	return m
}

// newSalt returns a campaign's salt: it makes keys campaign-specific
// without hashing the campaign id on every SPEND.
func newSalt() auctionKey { return auctionKey{rand.Uint64(), rand.Uint64()} }

func (m *auctionMemory) key(salt auctionKey, id string) auctionKey {
	return auctionKey{
		lo: (maphash.String(m.seedLo, id) ^ salt.lo) | 1,
		hi: maphash.String(m.seedHi, id) ^ salt.hi,
	}
}

func (m *auctionMemory) stripe(k auctionKey) *auctionStripe {
	if m.stripeBits == 0 {
		return &m.stripes[0]
	}
	return &m.stripes[k.hi>>(64-m.stripeBits)]
}

// spend answers a SPEND with an auction id: ":1" from memory for a retry of
// an allowed SPEND never refunded and asking no more than was charged, else
// decide's answer, remembered if allowed.
func (m *auctionMemory) spend(c *campaign, now time.Time, amount int64, id string) pacer.Decision {
	k := m.key(c.salt, id)
	s := m.stripe(k)
	t := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	pos, found := s.find(k)
	if found && t-s.ring[pos].at >= m.window {
		s.drop(pos) // too old to count: a fresh auction
		found = false
	}
	if found {
		if r := &s.ring[pos]; r.left == r.charged && amount <= r.charged {
			c.replayedAllows.Add(1) // a retry: answered "allowed" without a second charge
			return pacer.Allowed
		}
	}
	// Decided under the stripe's lock, so two concurrent retries of one id
	// are not both charged.
	dec, ds := c.decide(now, amount)
	if dec != pacer.Allowed {
		return dec
	}
	rec := auctionRecord{key: k, at: t, charged: amount, left: amount}
	if found {
		// Refunded, or asking for more: charged again. On the same
		// campaign-day, what is refundable adds up.
		if old := s.ring[pos]; old.at >= ds.day.Start.UnixNano() {
			rec.charged += old.charged
			rec.left += old.left
		}
		s.drop(pos)
	}
	s.insert(t, m.window, rec)
	return pacer.Allowed
}

// errAuctionUnknown: a refund names an auction id not remembered as allowed.
var errAuctionUnknown = errors.New("not seen as allowed")

// errDayClosed: a refund for an auction allowed on a campaign-day that has
// closed. That day's spend is counted (its leases settled or settling); its
// budget cannot come back, and crediting the refund to today would let today
// spend more than its budget.
var errDayClosed = errors.New("a campaign-day that has closed; nothing credited")

// refund checks and records a refund of amount micros for auction id of
// campaign c into the campaign-day ds, of which this daemon allowed net
// micros (net of refunds) so far.
func (m *auctionMemory) refund(c *campaign, now time.Time, id string, amount int64, ds *dayState, net int64) error {
	k := m.key(c.salt, id)
	s := m.stripe(k)
	t := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	pos, found := s.find(k)
	if !found || t-s.ring[pos].at >= m.window {
		return fmt.Errorf("auction %q %w in the last %v", id, errAuctionUnknown, s.kept(t, m.window).Round(time.Second))
	}
	r := &s.ring[pos]
	if r.at < ds.day.Start.UnixNano() {
		return fmt.Errorf("auction %q was allowed on %s, %w", id,
			bucket.DayOf(time.Unix(0, r.at), c.settings.Load().loc).Key, errDayClosed)
	}
	if amount > r.left {
		return fmt.Errorf("auction %q: refund of %d micros exceeds the %d it spent (net of refunds)", id, amount, r.left)
	}
	if amount > net {
		return fmt.Errorf("refund of %d micros exceeds the %d micros this daemon allowed for campaign %q today (net of refunds)", amount, net, c.id)
	}
	r.left -= amount
	return nil
}

// AuctionStats describe the daemon's auction-id memory.
type AuctionStats struct {
	// Window is how far back every allowed auction id is remembered: the
	// configured window, or less once the memory bound made the oldest go.
	Window      time.Duration
	Remembered  int
	MemoryBytes int64
}

func (m *auctionMemory) stats(now time.Time) AuctionStats {
	t := now.UnixNano()
	st := AuctionStats{Window: time.Duration(m.window)}
	for i := range m.stripes {
		s := &m.stripes[i]
		s.mu.Lock()
		st.Window = min(st.Window, s.kept(t, m.window))
		st.Remembered += s.n
		st.MemoryBytes += int64(len(s.ring))*recordBytes + int64(len(s.index))*indexBytes
		s.mu.Unlock()
	}
	return st
}

// kept is how far back from t the stripe remembers every allowed id.
func (s *auctionStripe) kept(t, window int64) time.Duration {
	return time.Duration(min(max(t-s.forgotAt, 0), window))
}

// tag is the part of a key's hash kept in its index slot: the bits its home
// slot is taken from.
func tag(k auctionKey) uint32 { return uint32(k.lo >> 1) }

func (s *auctionStripe) home(tag uint32) int { return int(tag) & (len(s.index) - 1) }

// find returns the ring position of k's record.
func (s *auctionStripe) find(k auctionKey) (int, bool) {
	if len(s.index) == 0 {
		return 0, false
	}
	mask := len(s.index) - 1
	t := tag(k)
	for i := s.home(t); ; i = (i + 1) & mask {
		e := s.index[i]
		if e == 0 {
			return 0, false
		}
		if uint32(e>>32) == t {
			if pos := int(uint32(e)) - 1; s.ring[pos].key == k {
				return pos, true
			}
		}
	}
}

// insert appends rec as the newest record, first forgetting records older
// than window and, at the memory bound, the oldest one.
func (s *auctionStripe) insert(t, window int64, rec auctionRecord) {
	for s.n > 0 && t-s.ring[s.head].at >= window {
		s.popHead()
	}
	if s.n == len(s.ring) {
		if len(s.ring) < s.maxRecords {
			s.grow()
		} else {
			s.forgotAt = max(s.forgotAt, s.ring[s.head].at)
			s.popHead()
		}
	}
	pos := s.head + s.n
	if pos >= len(s.ring) {
		pos -= len(s.ring)
	}
	s.ring[pos] = rec
	s.n++
	s.indexAdd(pos)
}

func (s *auctionStripe) popHead() {
	if s.ring[s.head].key.lo != 0 {
		s.indexRemove(s.head)
	}
	s.ring[s.head] = auctionRecord{}
	s.head++
	if s.head == len(s.ring) {
		s.head = 0
	}
	s.n--
}

// drop unindexes the record at pos; its ring slot stays until it is the
// oldest.
func (s *auctionStripe) drop(pos int) {
	s.indexRemove(pos)
	s.ring[pos].key = auctionKey{}
}

func (s *auctionStripe) indexAdd(pos int) {
	mask := len(s.index) - 1
	t := tag(s.ring[pos].key)
	i := s.home(t)
	for s.index[i] != 0 {
		i = (i + 1) & mask
	}
	s.index[i] = uint64(t)<<32 | uint64(pos+1)
}

// indexRemove deletes pos's slot by backward shift: the records after it in
// its probe run move up, so that lookups need no tombstones.
func (s *auctionStripe) indexRemove(pos int) {
	mask := len(s.index) - 1
	i := s.home(tag(s.ring[pos].key))
	for uint32(s.index[i]) != uint32(pos+1) {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		h := s.home(uint32(s.index[j] >> 32))
		// Move j's entry into the hole at i if its home is not in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			s.index[i] = s.index[j]
			i = j
		}
	}
	s.index[i] = 0
}

// grow doubles the ring (up to maxRecords) and rebuilds the index at most
// half full, or 3/4 at the largest size the memory bound allows.
func (s *auctionStripe) grow() {
	size := min(max(2*len(s.ring), 64), s.maxRecords)
	ring := make([]auctionRecord, size)
	for i := range s.n {
		ring[i] = s.ring[(s.head+i)%len(s.ring)]
	}
	s.ring, s.head = ring, 0
	idx := 2
	for idx < 2*size && idx < s.maxIndex {
		idx *= 2
	}
	s.index = make([]uint64, idx)
	for i := range s.n {
		if s.ring[i].key.lo != 0 {
			s.indexAdd(i)
		}
	}
}
