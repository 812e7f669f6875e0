package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/pacer/pacer/bucket"
	"go.uber.org/zap"
)

// The spent map: what each campaign-day's bucket has handed out, kept where
// a SIGKILL cannot lose it, so that Reclaim gives back exactly what a dead
// run's leases held unspent (see Journal).
//
// It is a file in the journal's directory, mapped MAP_SHARED into the
// daemon's memory: a store to it is a store to the kernel's page cache,
// which outlives the process however it dies. A machine crash may lose
// the pages (nothing syncs them), so the map is trusted only under the
// machine boot that wrote it; after a reboot Reclaim falls back to the
// journal's undripped rule.
//
// The map holds fixed slots, one per (run, campaign, day): every bucket a
// run makes for a campaign-day records into the slot (bucket.Record). A
// slot holds its key and
//
//   - net: what the day's buckets let SPENDs take, net of the refunds they
//     accepted: each bucket's own word, set by a plain store per allowed
//     SPEND or accepted REFUND (no atomic instruction, no system call, no
//     allocation), plus base, what the day's buckets that stopped
//     recording (dropped days: a campaign paused, cut, or loaded again)
//     had counted;
//   - closed: Σ (Amount − Unused) over the feeds that closed, each counted
//     once its entry below says so;
//   - an entry per lease (by the sequence number ending its id) from the
//     moment its feed opens until the journal records its release: its
//     amount, and its unused micros once the feed has closed.
//
// Bucket.Record's identity makes the leases still open in the buckets hold
// exactly Σ open amount − (net − closed) unspent micros, and each closed
// one exactly its Unused. Every update is ordered so that a process killed
// between two stores leaves a map whose reading gives back no more than
// that (a closing feed's entry is marked closed before closed counts it).
//
// A spentMap is safe for concurrent use.
type spentMap struct {
	f    *os.File
	data []byte // the mapping; nil once closed
	log  *zap.Logger

	mu      sync.Mutex
	index   map[spentKey]int // live slots
	free    []int            // freed slots below used
	used    int              // slots [0, used) have been live at some point
	users   map[int]*spentSlot
	closing bool
	forgot  string // the day forgetBefore last forgot before
}

// spentKey names a slot: the run's boot id (the middle of its lease ids,
// holder-boot-seq), the campaign and its day.
type spentKey struct{ boot, campaign, day string }

// The file's geometry. A slot is 1 KiB: its key (a campaign id is at most
// 128 bytes), its counters, spentEntries lease entries and the net words
// of spentInstances buckets. A daemon's buckets hold at most
// bucket.MaxFeeds feeds at once; the rest of the entries keep leases whose
// feed closed until their release is journaled. The file is sparse: only
// slots in use take space.
const (
	spentMagic     = "pacer spentmap2\n"
	spentHeader    = 4096
	spentSlotSize  = 1024
	spentSlots     = 1 << 16
	spentEntries   = 30
	spentEntrySize = 24
	spentInstances = 12
)

// Header offsets: magic, slot size, slot count, slots used, machine boot.
const (
	hdrSlotSize = 16
	hdrSlots    = 24
	hdrUsed     = 32
	hdrBoot     = 40 // a length byte and up to 63 bytes
)

// Slot offsets. An entry is a sequence number (0: free), an amount, and
// unused micros (−1 while the feed is open).
const (
	slotState     = 0 // 1: live
	slotPoisoned  = 8 // 1: the slot misses something; Reclaim does not trust it
	slotBase      = 16
	slotClosed    = 24
	slotBoot      = 32  // a length byte and up to 23 bytes
	slotDay       = 56  // a length byte and up to 15 bytes
	slotCampaign  = 72  // a length byte and up to 135 bytes
	slotEntries   = 208 // spentEntries × spentEntrySize, to 928
	slotInstances = 928 // spentInstances net words, to 1024
)

// openSpentMap opens (creating it if need be) the spent map at path, locked
// for this process. A map written under another machine boot, or with
// another geometry, is emptied: its slots cannot be trusted.
func openSpentMap(path string, log *zap.Logger) (*spentMap, error) {
	if log == nil {
		log = zap.NewNop()
	}
	boot := machineBoot()
	if boot == "" || len(boot) > 63 {
		return nil, errors.New("spent map: this machine has no boot id to tell a reboot by")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("spent map: %w", err)
	}
	m, err := mapSpent(f, boot, log)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spent map %s: %w", path, err)
	}
	return m, nil
}

func mapSpent(f *os.File, boot string, log *zap.Logger) (*spentMap, error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, fmt.Errorf("locked by another journal: %w", err)
	}
	const size = spentHeader + spentSlots*spentSlotSize
	hdr := make([]byte, hdrBoot+64)
	n, _ := f.ReadAt(hdr, 0)
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	fresh := n < len(hdr) || st.Size() != size || string(hdr[:16]) != spentMagic ||
		readInt(hdr[hdrSlotSize:]) != spentSlotSize || readInt(hdr[hdrSlots:]) != spentSlots ||
		readField(hdr[hdrBoot:], 63) != boot
	if fresh {
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		if err := f.Truncate(size); err != nil {
			return nil, err
		}
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	m := &spentMap{f: f, data: data, log: log, index: map[spentKey]int{}, users: map[int]*spentSlot{}}
	if fresh {
		m.word(hdrSlotSize).Store(spentSlotSize)
		m.word(hdrSlots).Store(spentSlots)
		writeField(data[hdrBoot:], boot)
		copy(data, spentMagic) // last: a header cut short is not one
	}
	m.used = int(min(max(m.word(hdrUsed).Load(), 0), spentSlots))
	for i := range m.used {
		if m.word(slotOff(i)+slotState).Load() != 1 {
			m.free = append(m.free, i)
			continue
		}
		k := m.keyOf(i)
		if other, dup := m.index[k]; dup { // cannot happen; if it does, trust neither
			m.word(slotOff(other) + slotPoisoned).Store(1)
			m.word(slotOff(i) + slotPoisoned).Store(1)
			continue
		}
		m.index[k] = i
	}
	return m, nil
}

func slotOff(i int) int { return spentHeader + i*spentSlotSize }

// word returns the int64 at off in the mapping (8-aligned: the mapping is
// page-aligned and every offset a multiple of 8).
func (m *spentMap) word(off int) *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Pointer(&m.data[off]))
}

func readInt(b []byte) int64 { return int64(binary.NativeEndian.Uint64(b)) }

// writeField stores s with a length byte before it.
func writeField(b []byte, s string) {
	b[0] = byte(len(s))
	copy(b[1:], s)
}

// readField returns the length-prefixed string at b, or "" if it does not
// fit in limit bytes.
func readField(b []byte, limit int) string {
	n := int(b[0])
	if n > limit {
		return ""
	}
	return string(b[1 : 1+n])
}

func (m *spentMap) keyOf(i int) spentKey {
	s := m.data[slotOff(i):]
	return spentKey{boot: readField(s[slotBoot:], 23), day: readField(s[slotDay:], 15), campaign: readField(s[slotCampaign:], 135)}
}

// fits reports whether k can be a slot's key.
func (k spentKey) fits() bool {
	return k.boot != "" && len(k.boot) <= 23 && k.day != "" && len(k.day) <= 15 && k.campaign != "" && len(k.campaign) <= 135
}

// spentSlot is a slot buckets of this process record into: it is their
// bucket.Recorder. inst[i] is the bucket whose net word is the slot's i-th.
type spentSlot struct {
	m    *spentMap
	i    int
	key  spentKey
	inst [spentInstances]*bucket.Bucket
}

// record makes b, a campaign-day's new bucket, record into k's slot,
// allocating it if need be (now: the clock, to tell the day's older
// buckets idle). It reports false if b does not record (the map is full or
// closed, or k has more buckets at once than a slot has words): then k's
// slot, if any, is marked untrusted, and Reclaim falls back to the
// undripped rule for k.
func (m *spentMap) record(b *bucket.Bucket, k spentKey, now time.Time) bool {
	m.mu.Lock()
	s, ok := m.slotFor(k)
	m.mu.Unlock()
	if !ok {
		return false
	}
	w, net, ok := m.instance(s, b, now)
	if !ok {
		m.mu.Lock()
		m.poison(s.i)
		m.mu.Unlock()
		return false
	}
	// Outside mu: a bucket's lock is taken before mu (a feed that closes
	// under it reports to the slot), never after.
	err := b.Record(net, s)
	m.mu.Lock()
	failed := err != nil || m.closing
	if failed {
		s.inst[w] = nil
		m.poison(s.i)
	}
	m.mu.Unlock()
	if failed {
		b.StopRecording(time.Time{}) // no feed yet: nothing was recorded
	}
	return !failed
}

// instance reserves a net word of slot s for b, and returns it: a free
// one, or one whose bucket stopped recording, idle at now (its day
// dropped), once its count is folded into the slot's base.
func (m *spentMap) instance(s *spentSlot, b *bucket.Bucket, now time.Time) (int, *int64, bool) {
	m.mu.Lock()
	if w := s.free(); w >= 0 && m.data != nil {
		s.inst[w] = b
		m.mu.Unlock()
		return w, m.netWord(s.i, w), true
	}
	old := s.inst
	m.mu.Unlock()
	m.foldIdle(s, old, now)
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := s.free(); w >= 0 && m.data != nil {
		s.inst[w] = b
		return w, m.netWord(s.i, w), true
	}
	return 0, nil, false
}

// netWord is slot i's w-th net word, for its bucket's plain stores; under
// mu.
func (m *spentMap) netWord(i, w int) *int64 {
	return (*int64)(unsafe.Pointer(&m.data[slotOff(i)+slotInstances+8*w]))
}

// free returns a net word no bucket holds, or -1; under mu.
func (s *spentSlot) free() int {
	for w, b := range s.inst {
		if b == nil {
			return w
		}
	}
	return -1
}

// fold adds the w-th net word of s, whose bucket ob stopped recording, to
// the slot's base and frees it: base first, so a process killed between
// the two stores counts it twice (less given back), never not at all.
// Under mu.
func (m *spentMap) fold(s *spentSlot, w int, ob *bucket.Bucket) {
	if s.inst[w] != ob || m.data == nil {
		return
	}
	off := slotOff(s.i)
	word := m.word(off + slotInstances + 8*w)
	m.word(off + slotBase).Add(word.Load())
	word.Store(0)
	s.inst[w] = nil
}

// slotFor returns k's slot for this process's buckets, allocating it if
// need be; under mu.
func (m *spentMap) slotFor(k spentKey) (*spentSlot, bool) {
	if m.closing || !k.fits() {
		if i, ok := m.index[k]; ok {
			m.poison(i)
		}
		return nil, false
	}
	i, ok := m.index[k]
	if !ok {
		if i, ok = m.allocate(k); !ok {
			m.log.Warn("spent map full: a crash will give back only what this campaign-day's leases had not dripped",
				zap.String("campaign", k.campaign), zap.String("day", k.day))
			return nil, false
		}
	}
	s := m.users[i]
	if s == nil {
		s = &spentSlot{m: m, i: i, key: k}
		m.users[i] = s
	}
	return s, true
}

// allocate takes a free slot for k: its key and zeroed counters and
// entries are written before the slot is marked live, so a process killed
// meanwhile leaves it free. Under mu.
func (m *spentMap) allocate(k spentKey) (int, bool) {
	var i int
	switch {
	case len(m.free) > 0:
		i, m.free = m.free[len(m.free)-1], m.free[:len(m.free)-1]
	case m.used < spentSlots:
		i = m.used
		m.used++
		m.word(hdrUsed).Store(int64(m.used))
	default:
		return 0, false
	}
	off := slotOff(i)
	clear(m.data[off+8 : off+spentSlotSize])
	s := m.data[off:]
	writeField(s[slotBoot:], k.boot)
	writeField(s[slotDay:], k.day)
	writeField(s[slotCampaign:], k.campaign)
	m.word(off + slotState).Store(1)
	m.index[k] = i
	return i, true
}

// poison marks slot i untrusted; under mu.
func (m *spentMap) poison(i int) {
	if m.data != nil {
		m.word(slotOff(i) + slotPoisoned).Store(1)
	}
}

// leaseSeq returns the sequence number ending a lease id (holder-boot-seq,
// the seq in base 36), or false.
func leaseSeq(id string) (uint64, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(id[i+1:], 36, 63)
	return n, err == nil && n > 0
}

// leaseBoot returns the boot id in a lease id (holder-boot-seq), or "".
func leaseBoot(id string) string {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return ""
	}
	j := strings.LastIndexByte(id[:i], '-')
	if j < 0 {
		return ""
	}
	return id[j+1 : i]
}

// entry returns the offset of slot i's entry with seq (0: a free one), or
// -1; under mu.
func (m *spentMap) entry(i int, seq uint64) int {
	for e := range spentEntries {
		off := slotOff(i) + slotEntries + e*spentEntrySize
		if uint64(m.word(off).Load()) == seq {
			return off
		}
	}
	return -1
}

// FeedOpened records an open lease: its amount and open state first, then
// its sequence number, which makes the entry count. With no free entry,
// that of the longest-closed lease is taken (Reclaim then gives that lease
// back by the undripped rule); with none closed either, or a lease id
// without a sequence number, the slot is no longer trusted.
func (s *spentSlot) FeedOpened(id string, amount int64) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	seq, ok := leaseSeq(id)
	if m.data == nil {
		return
	}
	if !ok {
		m.poison(s.i)
		return
	}
	off := m.entry(s.i, 0)
	if off < 0 {
		off = m.oldestClosed(s.i)
	}
	if off < 0 {
		m.poison(s.i)
		return
	}
	m.word(off).Store(0)
	m.word(off + 8).Store(amount)
	m.word(off + 16).Store(-1)
	m.word(off).Store(int64(seq))
}

// oldestClosed returns the offset of slot i's closed entry with the lowest
// sequence number, or -1; under mu.
func (m *spentMap) oldestClosed(i int) int {
	best, bestSeq := -1, uint64(0)
	for e := range spentEntries {
		off := slotOff(i) + slotEntries + e*spentEntrySize
		seq := uint64(m.word(off).Load())
		if seq != 0 && m.word(off+16).Load() >= 0 && (best < 0 || seq < bestSeq) {
			best, bestSeq = off, seq
		}
	}
	return best
}

// FeedClosed records a closed feed: its entry's unused micros first, then
// closed counts what it spent. Killed in between, the map gives back less
// than the truth (the lease's Unused, and the open leases' share short by
// what it spent), never more.
func (s *spentSlot) FeedClosed(c bucket.Closed) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return
	}
	if seq, ok := leaseSeq(c.ID); ok {
		if off := m.entry(s.i, seq); off >= 0 {
			m.word(off + 16).Store(c.Unused)
		}
	}
	m.word(slotOff(s.i) + slotClosed).Add(c.Amount - c.Unused)
}

// released forgets the entry of a lease whose release the journal has
// recorded: nothing is left to reclaim of it.
func (m *spentMap) released(k spentKey, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i, ok := m.index[k]; ok && m.data != nil && seq != 0 {
		if off := m.entry(i, seq); off >= 0 {
			m.word(off).Store(0)
		}
	}
}

// spentEntry is a lease's entry as read back; unused < 0: open.
type spentEntry struct{ amount, unused int64 }

// spentSnapshot is a slot as Reclaim reads it.
type spentSnapshot struct {
	net, closed int64
	poisoned    bool
	entries     map[uint64]spentEntry
}

// snapshot reads k's slot; false if there is none.
func (m *spentMap) snapshot(k spentKey) (spentSnapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.index[k]
	if !ok || m.data == nil {
		return spentSnapshot{}, false
	}
	off := slotOff(i)
	snap := spentSnapshot{net: m.word(off + slotBase).Load(), closed: m.word(off + slotClosed).Load(),
		poisoned: m.word(off+slotPoisoned).Load() != 0, entries: map[uint64]spentEntry{}}
	for w := range spentInstances {
		snap.net += m.word(off + slotInstances + 8*w).Load()
	}
	for e := range spentEntries {
		eo := off + slotEntries + e*spentEntrySize
		if seq := uint64(m.word(eo).Load()); seq != 0 {
			if _, dup := snap.entries[seq]; dup {
				snap.poisoned = true
			}
			snap.entries[seq] = spentEntry{amount: m.word(eo + 8).Load(), unused: m.word(eo + 16).Load()}
		}
	}
	return snap, true
}

// dropUnused frees the slots no bucket of this process records into for
// which keep is false.
func (m *spentMap) dropUnused(keep func(spentKey) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return
	}
	for k, i := range m.index {
		if m.users[i] == nil && !keep(k) {
			m.freeSlot(k, i)
		}
	}
}

// freeSlot marks slot i free; under mu.
func (m *spentMap) freeSlot(k spentKey, i int) {
	m.word(slotOff(i) + slotState).Store(0)
	delete(m.index, k)
	delete(m.users, i)
	m.free = append(m.free, i)
}

// forgetBefore frees the slots of this process's buckets for days before
// day (a "2006-01-02" key) whose buckets have no feed open at now, once
// per day: those buckets stop recording.
func (m *spentMap) forgetBefore(day string, now time.Time) {
	m.mu.Lock()
	if m.forgot == day || m.closing {
		m.mu.Unlock()
		return
	}
	m.forgot = day
	var old []*spentSlot
	for _, s := range m.users {
		if s.key.day < day {
			old = append(old, s)
		}
	}
	m.mu.Unlock()
	for _, s := range old {
		m.forgetSlot(s, now)
	}
}

// foldIdle stops recording the buckets of old (s's, as read under mu) that
// are idle at now, and folds each into s. Called without mu: StopRecording
// takes the bucket's lock, which is never taken inside mu.
func (m *spentMap) foldIdle(s *spentSlot, old [spentInstances]*bucket.Bucket, now time.Time) {
	for w, b := range old {
		if b != nil && b.StopRecording(now) {
			m.mu.Lock()
			m.fold(s, w, b)
			m.mu.Unlock()
		}
	}
}

// forgetSlot stops s's buckets recording if they are idle at now and frees
// s once none records into it.
func (m *spentMap) forgetSlot(s *spentSlot, now time.Time) {
	m.mu.Lock()
	old := s.inst
	m.mu.Unlock()
	m.foldIdle(s, old, now)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.inst == [spentInstances]*bucket.Bucket{} && m.users[s.i] == s && !m.closing {
		m.freeSlot(s.key, s.i)
	}
}

// close stops every bucket recording into the map, then unmaps it and
// closes the file (which drops its lock). The slots stay in the file for
// the next run.
func (m *spentMap) close() error {
	m.mu.Lock()
	m.closing = true
	var buckets []*bucket.Bucket
	for _, s := range m.users {
		for _, b := range s.inst {
			if b != nil {
				buckets = append(buckets, b)
			}
		}
	}
	m.mu.Unlock()
	for _, b := range buckets {
		b.StopRecording(time.Time{})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return nil
	}
	err := syscall.Munmap(m.data)
	m.data = nil
	return errors.Join(err, m.f.Close())
}

// reclaimShare is what Reclaim gives back of one lease: unused micros, and
// whether the figure is the spent map's exact one (a lease still open in
// its bucket, never released before, or one whose closed feed the map
// recorded, released before with the same figure if at all) or the
// undripped lower bound.
type reclaimShare struct {
	unused int64
	exact  bool
}

// spentKeyOf is the slot of a lease's run and campaign-day.
func spentKeyOf(jl JournalLease) spentKey {
	return spentKey{boot: leaseBoot(jl.ID), campaign: jl.Key.Campaign, day: jl.Key.Day}
}

// planReclaim decides what Reclaim gives back of each of the open leases
// in left, per campaign-day of a run (see groupShares; at is the instant
// of the undripped rule). A campaign-day whose leases an earlier Reclaim
// decided keeps that decision: it was journaled in one line (U) before any
// of them was released, so a lease released by that Reclaim, whose close
// line a crash lost, is released again with the same figure, which the
// ledger answers with its first answer, and no micro of a campaign-day is
// given back twice. A campaign-day whose decision cannot be journaled is
// left out (and in the journal, for the next run), with an error.
func (j *Journal) planReclaim(left []JournalLease, at time.Time) (map[string]reclaimShare, error) {
	groups := map[spentKey][]JournalLease{}
	for _, jl := range left {
		if j.isOpen(jl.ID) {
			k := spentKeyOf(jl)
			groups[k] = append(groups[k], jl)
		}
	}
	out := map[string]reclaimShare{}
	var errs []error
	for k, g := range groups {
		slices.SortFunc(g, func(a, b JournalLease) int { return strings.Compare(a.ID, b.ID) })
		shares, ok := j.decided(g)
		if !ok {
			var snap spentSnapshot
			var have bool
			if j.spent != nil {
				snap, have = j.spent.snapshot(k)
			}
			shares = groupShares(snap, have, g, at)
			if err := j.decide(g, shares); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		for i, jl := range g {
			out[jl.ID] = shares[i]
		}
	}
	return out, errors.Join(errs...)
}

// groupShares is what the open leases g of one campaign-day of a dead run
// held unspent, lease by lease, from that campaign-day's slot snap (have:
// there is one).
//
// The invariant: Σ shares ≤ what those leases held unspent when the run
// died, and no lease's share exceeds its amount. From the slot (see
// spentMap and bucket.Record): a lease whose feed had closed held its
// entry's Unused; the leases whose feeds were open held together
// pool = Σ open entries' amount − (net − closed), the buckets' tokens and
// undripped reserve, shared out among them (what each had not dripped by
// at first, then up to its amount: only the campaign-day's total matters
// for money); a lease with no entry (its feed not yet opened, or its entry
// given up for a newer one) gives back what had not dripped by at, less
// than it held. A slot that is missing or untrusted, or that disagrees with
// the journal, gives every lease the undripped rule.
func groupShares(snap spentSnapshot, have bool, g []JournalLease, at time.Time) []reclaimShare {
	out := make([]reclaimShare, len(g))
	for i, jl := range g {
		out[i] = reclaimShare{unused: jl.Unspendable(at)}
	}
	if !have || snap.poisoned || snap.net < snap.closed {
		return out
	}
	pool := snap.closed - snap.net
	for _, e := range snap.entries {
		if e.unused < 0 {
			pool += e.amount
		}
	}
	var members []int
	exact := make([]reclaimShare, len(g))
	copy(exact, out)
	for i, jl := range g {
		seq, _ := leaseSeq(jl.ID)
		e, ok := snap.entries[seq]
		switch {
		case !ok:
		case e.amount != jl.Amount || e.unused > jl.Amount:
			return out // the slot is not this journal's
		case e.unused >= 0:
			exact[i] = reclaimShare{unused: e.unused, exact: true}
		default:
			members = append(members, i)
			exact[i] = reclaimShare{exact: true}
		}
	}
	pool = max(pool, 0)
	for pass := range 2 {
		for _, i := range members {
			want := g[i].Unspendable(at)
			if pass == 1 {
				want = g[i].Amount
			}
			add := min(max(want-exact[i].unused, 0), pool)
			exact[i].unused += add
			pool -= add
		}
	}
	return exact
}

// decided returns the shares an earlier Reclaim decided for g, if it did.
func (j *Journal) decided(g []JournalLease) ([]reclaimShare, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]reclaimShare, len(g))
	found := false
	for i, jl := range g {
		// A lease of a decided campaign-day without a decision was not open
		// when it was made: it cannot be. It gives back nothing.
		sh, ok := j.shares[jl.ID]
		out[i], found = sh, found || ok
	}
	return out, found
}

// decide journals the shares of g in one line before any is released.
func (j *Journal) decide(g []JournalLease, shares []reclaimShare) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	ids := make([]string, len(g))
	decided := map[string]reclaimShare{}
	for i, jl := range g {
		ids[i] = jl.ID
		decided[jl.ID] = shares[i]
	}
	if j.f == nil {
		return errors.New("lease journal closed")
	}
	if _, err := j.f.WriteString(sharesLine(ids, decided)); err != nil {
		return fmt.Errorf("lease journal: cannot record what a reclaim gives back; releasing none of %d leases of %s/%s: %w",
			len(g), g[0].Key.Campaign, g[0].Key.Day, err)
	}
	j.stale++
	maps.Copy(j.shares, decided)
	return nil
}

// dropSpent frees the spent map's slots of runs no bucket here records for
// whose campaign-days no lease is open.
func (j *Journal) dropSpent() {
	if j.spent == nil {
		return
	}
	j.mu.Lock()
	open := map[spentKey]bool{}
	for _, jl := range j.open {
		open[spentKeyOf(jl)] = true
	}
	j.mu.Unlock()
	j.spent.dropUnused(func(k spentKey) bool { return open[k] })
}

// record makes a campaign-day's new bucket of run boot record into the
// spent map, if there is one.
func (j *Journal) record(b *bucket.Bucket, boot, campaign, day string, now time.Time) {
	if j.spent != nil {
		j.spent.record(b, spentKey{boot: boot, campaign: campaign, day: day}, now)
	}
}

// forgetSpentBefore frees the spent map's slots of this run's buckets for
// days before day, once they hold no open feed.
func (j *Journal) forgetSpentBefore(day string, now time.Time) {
	if j.spent != nil {
		j.spent.forgetBefore(day, now)
	}
}
