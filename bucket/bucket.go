package bucket

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// MaxFeeds is how many grants a Bucket may hold open at once. A daemon
// renews one lease before the previous one ends, so two or three overlap
// in practice; the fixed bound keeps the feeds in an array the hot path
// walks without allocating.
const MaxFeeds = 8

// Errors returned by AddGrant, wrapped with the grant's details. Callers
// branch on them with errors.Is: a rejected grant's budget is still leased
// in the ledger and must be released there.
var (
	ErrInvalidGrant   = errors.New("bucket: invalid grant")
	ErrGrantExpired   = errors.New("bucket: grant already past its end")
	ErrDuplicateGrant = errors.New("bucket: duplicate grant id")
	ErrTooManyFeeds   = errors.New("bucket: too many open feeds")
)

// Grant is a lease's budget as the bucket sees it: Amount micros that drip
// into the bucket evenly over [Start, DripEnd), spendable until End. End is
// the last instant the lease may be spent from, which the daemon computes
// as the ledger's expiry minus the clock-skew bound: spending stops before
// anyone else can reuse the budget.
//
// DripEnd zero means End: the drip then reaches the full Amount only as the
// feed closes, so its last micros are never spendable. That is fine for a
// lease among others (they go back to the ledger, unused) but strands a
// lease no larger than one SPEND, or the last one a campaign-day has: an
// earlier DripEnd makes the whole Amount spendable during [DripEnd, End).
// A DripEnd at or before the instant the grant is added credits it all at
// once.
type Grant struct {
	ID         string
	Amount     int64 // micros
	Start, End time.Time
	DripEnd    time.Time // zero: End; else Start < DripEnd <= End
}

// Closed is the outcome of a grant whose feed has closed. Unused micros
// must go back to the ledger when the lease is released; Amount-Unused is
// what the lease spent (net of refunds this bucket accepted). Forgone is
// the part of Unused the feed was entitled to while the bucket was at
// capacity (see Bucket); the rest of Unused is what it took with it from
// the tokens and what it had not been entitled to yet.
type Closed struct {
	ID             string
	Amount, Unused int64 // micros
	Forgone        int64 // micros, of Unused
}

// Stats is a snapshot of a Bucket, in micros. At every instant
//
//	Granted == Spent - Refunded + Tokens + Reserve + Returned
//
// exactly, and Spent-Refunded <= Granted-Returned: the bucket never hands
// out a micro it was not granted.
type Stats struct {
	Tokens        int64 // spendable now
	Reserve       int64 // granted to open feeds but not dripped yet
	Capacity      int64
	Granted       int64 // sum of accepted grants' Amount
	Spent         int64 // sum of allowed spends
	Refunded      int64 // sum of accepted refunds
	Returned      int64 // sum of closed feeds' Unused
	OpenFeeds     int
	DripPerSecond int64 // nominal rate of the feeds whose window contains now
	// Demand: micros asked for by Spend calls with a positive amount, and
	// how many of those calls were allowed and denied.
	Requested       int64
	Allows, Denials int64
}

// feed is an open grant. Times are Unix nanoseconds of the wall clock,
// which is what lease expiries in the ledger are measured against.
type feed struct {
	id         string
	amount     int64
	start, end int64
	dripEnd    int64 // the whole amount is entitled from here on; <= end
	dripped    int64 // moved into tokens so far; never more than amount
	due        int64 // entitlement accounted for: dripped or forgone at capacity

	// amount = perNano*window + rem, and frac = floor(rem * 2^64 / window),
	// where window = dripEnd - start:
	// precomputed so that the hot path finds its entitlement with
	// multiplications only. A 128-bit division costs more than the rest of
	// Spend together on common server CPUs.
	perNano, rem, frac uint64
}

func newFeed(id string, amount, start, dripEnd, end int64) feed {
	window := uint64(dripEnd - start)
	perNano, rem := uint64(amount)/window, uint64(amount)%window
	frac, _ := bits.Div64(rem, 0, window) // rem < window: cannot panic
	return feed{id: id, amount: amount, start: start, end: end, dripEnd: dripEnd, perNano: perNano, rem: rem, frac: frac}
}

// entitled returns floor(amount * elapsed / window), exactly, for
// 0 <= elapsed < window.
//
// amount*elapsed/window = perNano*elapsed + rem*elapsed/window, and the
// first term is below amount, so it fits. For the second, frac
// underestimates rem*2^64/window by less than 1, so the high word of
// elapsed*frac underestimates floor(rem*elapsed/window) by at most
// elapsed/2^64 < 1: one check of the next integer, in 128 bits, makes it
// exact.
func (f *feed) entitled(elapsed uint64) int64 {
	est, _ := bits.Mul64(elapsed, f.frac)
	window := uint64(f.dripEnd - f.start)
	ph, pl := bits.Mul64(f.rem, elapsed)
	qh, ql := bits.Mul64(est+1, window)
	if qh < ph || (qh == ph && ql <= pl) {
		est++
	}
	return int64(f.perNano*elapsed + est)
}

// Bucket is a campaign-day's local token bucket, in micros.
//
// Tokens come only from grants (leases). Each grant drips into the bucket
// evenly over its window, so the host's spending follows the pace at which
// the ledger hands out budget instead of bursting at each lease: by instant
// t a feed is entitled to floor(Amount × (t−Start) / (DripEnd−Start))
// micros, computed exactly in 128 bits, and to all of Amount from DripEnd
// (by default End) until it closes at End. Capacity bounds what one instant can
// spend: entitlement that arrives while tokens are at capacity is forgone,
// not banked, so a bucket idle for a while cannot release its feeds' past
// entitlement in one burst; forgone micros stay in their feed and go back to
// the ledger, unused, when it closes. Feeds drip earliest End first.
//
// The accounting that makes "no overspend" hold:
//   - Tokens never exceed the sum of what the open feeds have dripped. When
//     a feed closes it withdraws from the tokens what of them the other open
//     feeds' drip does not cover (at most what it dripped), so no token
//     outlives the leases that back it. Spends are charged to the feeds
//     that end first, as drip fills them: a lease ending while its
//     successor's drip covers the bucket takes none of the successor's
//     tokens with it.
//   - A feed closes when its End is reached, inside every call: Spend never
//     uses a lease past its deadline even if nobody calls Expire.
//   - A closing feed's Unused is its undripped amount plus what it
//     withdrew; it goes back to the ledger. Amount-Unused was spent.
//   - A refund is accepted only up to the open feeds' dripped micros not
//     currently held as tokens; a refund of spend whose lease has closed
//     cannot be backed, so it is not minted.
//   - The clock is a parameter. An instant earlier than one already seen
//     is treated as that later one: a clock stepping backwards adds no
//     entitlement and reopens nothing.
//
// So, exactly and at every instant (see Stats),
//
//	Granted == Spent − Refunded + Tokens + Reserve + Returned
//
// and since Tokens and Reserve are never negative, the bucket never lets
// out more than it was granted minus what it handed back.
//
// Instants must lie within the range of time.Time.UnixNano (years 1678 to
// 2262).
//
// A Bucket is safe for concurrent use; each has its own mutex, so buckets
// of different campaigns never contend. Spend does not allocate. The zero
// value is not usable; create buckets with New.
type Bucket struct {
	mu       sync.Mutex
	capacity int64
	tokens   int64
	now      int64 // high-water mark of the instants seen
	feeds    [MaxFeeds]feed
	nfeeds   int      // feeds[:nfeeds] are open, sorted by end, then age
	closed   []Closed // closed by advance, not yet handed out

	granted, spent, refunded, returned int64
	// Demand, counted under the lock Spend takes anyway, so that callers
	// need no counters of their own on the hot path.
	requested, allows, denials int64

	// The copy of the accounts kept outside the bucket (Record); nil: none.
	// stopped: it was recorded, and no longer is (it takes no grant).
	net     *int64
	rec     Recorder
	stopped bool
}

// New returns an empty bucket holding at most capacityMicros tokens from
// drip (a few seconds of the campaign's pace is typical). A capacity below
// zero is taken as zero.
func New(capacityMicros int64) *Bucket {
	return &Bucket{
		capacity: max(capacityMicros, 0),
		now:      math.MinInt64,
		// Enough for every open feed to close twice between two calls to
		// Expire, so advance does not allocate in any ordinary schedule.
		closed: make([]Closed, 0, 2*MaxFeeds),
	}
}

// SetCapacity changes the capacity, e.g. when the campaign's pace changes.
// Tokens already above a lowered capacity stay spendable; drip pauses
// until spending brings them below it. A capacity below zero is taken as
// zero.
func (b *Bucket) SetCapacity(capacityMicros int64) {
	b.mu.Lock()
	b.capacity = max(capacityMicros, 0)
	b.mu.Unlock()
}

// AddGrant opens a feed that drips g.Amount micros over [g.Start, g.End).
// It advances the bucket to now first. It fails with ErrInvalidGrant when
// g.ID is empty, g.Amount <= 0, g.End <= g.Start or g.DripEnd is set and
// not in (g.Start, g.End], ErrGrantExpired when
// g.End <= now, ErrDuplicateGrant when a feed with g.ID is open or closed
// but not yet handed out, and ErrTooManyFeeds when MaxFeeds feeds are open.
// A rejected grant leaves the bucket as advancing to now would.
func (b *Bucket) AddGrant(now time.Time, g Grant) error {
	if g.ID == "" {
		return fmt.Errorf("%w: empty id", ErrInvalidGrant)
	}
	if g.Amount <= 0 {
		return fmt.Errorf("%w %q: amount %d micros is not positive", ErrInvalidGrant, g.ID, g.Amount)
	}
	start, ok1 := unixNanos(g.Start)
	end, ok2 := unixNanos(g.End)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w %q: window [%v, %v) outside years 1678-2262", ErrInvalidGrant, g.ID, g.Start, g.End)
	}
	if end <= start {
		return fmt.Errorf("%w %q: end %v is not after start %v", ErrInvalidGrant, g.ID, g.End, g.Start)
	}
	dripEnd := end
	if !g.DripEnd.IsZero() {
		dripEnd = g.DripEnd.UnixNano()
		if !g.DripEnd.After(g.Start) || g.DripEnd.After(g.End) {
			return fmt.Errorf("%w %q: drip end %v is not in (%v, %v]", ErrInvalidGrant, g.ID, g.DripEnd, g.Start, g.End)
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.advance(now)
	if end <= t {
		return fmt.Errorf("%w: %q ends %v, now %v", ErrGrantExpired, g.ID, g.End, time.Unix(0, t))
	}
	for i := range b.nfeeds {
		if b.feeds[i].id == g.ID {
			return fmt.Errorf("%w: %q is open", ErrDuplicateGrant, g.ID)
		}
	}
	for _, c := range b.closed {
		if c.ID == g.ID {
			return fmt.Errorf("%w: %q is closed", ErrDuplicateGrant, g.ID)
		}
	}
	if b.nfeeds == MaxFeeds {
		return fmt.Errorf("%w: %d open, cannot add %q", ErrTooManyFeeds, MaxFeeds, g.ID)
	}
	if b.stopped {
		return fmt.Errorf("%w: cannot add %q", ErrRecordingStopped, g.ID)
	}
	if g.Amount > math.MaxInt64-b.granted {
		return fmt.Errorf("%w %q: amount %d micros overflows the %d micros granted", ErrInvalidGrant, g.ID, g.Amount, b.granted)
	}

	// Keep feeds ordered by end: drip serves the earliest deadline first,
	// so the lease that must be released soonest is spent first, and
	// advance finds expired feeds at the front.
	i := b.nfeeds
	for i > 0 && b.feeds[i-1].end > end {
		b.feeds[i] = b.feeds[i-1]
		i--
	}
	b.feeds[i] = newFeed(g.ID, g.Amount, start, dripEnd, end)
	b.nfeeds++
	b.granted += g.Amount
	if b.rec != nil {
		b.rec.FeedOpened(g.ID, g.Amount)
	}
	// The new feed may already be entitled to drip (Start in the past).
	b.drip(t)
	return nil
}

// Recorder keeps a copy of a bucket's accounts outside the bucket, where
// whoever settles its grants after its process dies can read them (a
// memory-mapped file, say: see Record). Its methods are called under the
// bucket's lock, in the order the changes happen; they must not call the
// bucket.
type Recorder interface {
	// FeedOpened: the feed of grant id opened with amount micros. None of
	// them is spendable before the call returns.
	FeedOpened(id string, amount int64)
	// FeedClosed: a feed closed, with the outcome Expire, Revoke or
	// CloseFeed hands out for it.
	FeedClosed(c Closed)
}

// Errors of Record, and of AddGrant on a bucket that stopped recording.
var (
	ErrRecorded         = errors.New("bucket: cannot start recording a bucket that has had a grant or was recorded")
	ErrRecordingStopped = errors.New("bucket: recorded bucket stopped recording; it takes no grant")
)

// Record makes the bucket keep a copy of its accounts as they change, for
// a reader in another process after this one died: *net is set to Spent −
// Refunded (a plain store of an aligned word, under the bucket's lock,
// before the Spend or Refund that changed it returns), and r is told of
// every feed that opens or closes. Record must come before the bucket's
// first grant (ErrRecorded otherwise), so that from then on, exactly,
//
//	*net − Σ closed (Amount − Unused) = Σ open dripped − Tokens
//
// and Σ open Amount − (*net − Σ closed (Amount − Unused)) is Tokens +
// Reserve: what the bucket holds and no SPEND has taken. Spend pays one
// store for it: no atomic instruction, no allocation, no system call. In
// this process, read *net only once the bucket stopped recording (or no
// goroutine uses it). A bucket records until StopRecording.
func (b *Bucket) Record(net *int64, r Recorder) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.granted != 0 || b.net != nil || b.rec != nil || b.stopped {
		return ErrRecorded
	}
	b.net, b.rec = net, r
	return nil
}

// StopRecording ends Record's copy: once it returns, neither net nor the
// Recorder hears from the bucket again, and AddGrant refuses it
// (ErrRecordingStopped): no token it would not record is ever spent. With
// idleAt set, it advances the bucket to idleAt first (a feed that ended
// then closes, recorded) and stops only if no feed is open, reporting
// whether it stopped.
func (b *Bucket) StopRecording(idleAt time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.net == nil && b.rec == nil {
		return true
	}
	if !idleAt.IsZero() {
		b.advance(idleAt)
		if b.nfeeds > 0 {
			return false
		}
	}
	b.net, b.rec, b.stopped = nil, nil, true
	return true
}

// Spend advances the bucket to now and takes amount micros from its tokens
// if it holds that many, reporting whether it did. amount <= 0 is never
// allowed. Spend does not allocate unless a feed closes and more than
// 2*MaxFeeds closed feeds are waiting for Expire.
func (b *Bucket) Spend(now time.Time, amount int64) bool {
	if amount <= 0 {
		return false
	}
	b.mu.Lock()
	b.advance(now)
	b.requested += amount
	ok := b.tokens >= amount
	if ok {
		b.tokens -= amount
		b.spent += amount
		b.allows++
		if b.net != nil {
			*b.net = b.spent - b.refunded
		}
	} else {
		b.denials++
	}
	b.mu.Unlock()
	return ok
}

// ForgetDenial takes back the count of one denied Spend of amount (its
// denial and the micros it asked), for a caller that decides that SPEND
// again: the demand counts (Stats' Requested, Denials) then count it once.
// It changes no tokens.
func (b *Bucket) ForgetDenial(amount int64) {
	b.mu.Lock()
	if b.denials > 0 && b.requested >= amount {
		b.denials--
		b.requested -= amount
	}
	b.mu.Unlock()
}

// Refund advances the bucket to now and gives back up to amount micros of
// earlier spend (an auction lost after SPEND, say), returning how many
// micros it accepted. It accepts only what the open feeds have dripped and
// the bucket no longer holds: spend from a lease that has since closed was
// already accounted to that lease, so refunding it here would mint money.
// The caller reports any rest as spent. Refunds may lift tokens above
// capacity; capacity only bounds drip.
func (b *Bucket) Refund(now time.Time, amount int64) int64 {
	if amount <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	var backed int64
	for i := range b.nfeeds {
		backed += b.feeds[i].dripped
	}
	accepted := min(amount, max(backed-b.tokens, 0))
	b.tokens += accepted
	b.refunded += accepted
	if b.net != nil && accepted > 0 {
		*b.net = b.spent - b.refunded
	}
	return accepted
}

// Expire advances the bucket to now, which closes every feed whose End is
// at or before now, and returns all feeds closed since the last Expire or
// Revoke, earliest End first. It returns nil if there are none. Each closed
// feed is returned exactly once, by Expire, Revoke or CloseFeed.
func (b *Bucket) Expire(now time.Time) []Closed {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.takeClosed()
}

// Revoke closes every feed at now and returns them with any closed earlier
// and not yet handed out. Tokens drop to zero: the campaign was paused,
// cut or its day ended, and every unspent micro goes back to the ledger.
// The bucket stays usable for later grants.
func (b *Bucket) Revoke(now time.Time) []Closed {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	for b.nfeeds > 0 {
		b.closed = append(b.closed, b.closeFeed(0))
	}
	return b.takeClosed()
}

// CloseFeed closes the feed of grant id early, e.g. when its lease is
// released before its end, and reports its outcome. A feed already closed
// by the clock but not yet handed out is returned too (and not again by
// Expire). It reports false if no such feed exists.
func (b *Bucket) CloseFeed(now time.Time, id string) (Closed, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	for i := range b.nfeeds {
		if b.feeds[i].id == id {
			return b.closeFeed(i), true
		}
	}
	for i, c := range b.closed {
		if c.ID == id {
			b.closed = slices.Delete(b.closed, i, i+1)
			return c, true
		}
	}
	return Closed{}, false
}

// Stats advances the bucket to now and returns a snapshot of it.
func (b *Bucket) Stats(now time.Time) Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.advance(now)
	s := Stats{
		Tokens:    b.tokens,
		Capacity:  b.capacity,
		Granted:   b.granted,
		Spent:     b.spent,
		Refunded:  b.refunded,
		Returned:  b.returned,
		OpenFeeds: b.nfeeds,
		Requested: b.requested,
		Allows:    b.allows,
		Denials:   b.denials,
	}
	for i := range b.nfeeds {
		f := &b.feeds[i]
		s.Reserve += f.amount - f.dripped
		if f.start <= t && t < f.dripEnd {
			// Saturate rather than wrap: a nanosecond-long grant has an
			// absurd rate, not a negative one.
			r := mulDivSat(uint64(f.amount), uint64(time.Second), uint64(f.dripEnd-f.start))
			s.DripPerSecond = satAdd(s.DripPerSecond, r)
		}
	}
	return s
}

// advance moves the bucket to instant now (or to its high-water mark, if
// now is earlier), closing feeds that have ended and dripping the others'
// entitlement up to capacity. It returns the instant it advanced to.
// b.mu must be held.
func (b *Bucket) advance(now time.Time) int64 {
	t := now.UnixNano()
	if t < b.now {
		t = b.now
	}
	b.now = t
	// Close before dripping: an ended feed's tokens would be withdrawn at
	// once anyway, and closing first frees capacity for the open ones.
	for b.nfeeds > 0 && b.feeds[0].end <= t {
		b.closed = append(b.closed, b.closeFeed(0))
	}
	b.drip(t)
	return t
}

// drip moves each open feed's new entitlement at t into tokens, earliest end
// first, up to capacity; the rest of it is forgone (see Bucket).
func (b *Bucket) drip(t int64) {
	for i := range b.nfeeds {
		f := &b.feeds[i]
		if f.due == f.amount || t <= f.start {
			continue
		}
		// t < f.end here: advance closed the rest.
		e := f.amount
		if t < f.dripEnd {
			e = f.entitled(uint64(t - f.start))
		}
		owed := e - f.due
		if owed <= 0 {
			continue
		}
		// What does not fit under the capacity is forgone, not held back:
		// a bucket idle at capacity must not bank its feeds' entitlement
		// and release it in one burst when spending resumes. The forgone
		// micros stay in the feed and go back to the ledger when it closes.
		add := min(owed, max(b.capacity-b.tokens, 0))
		b.tokens += add
		f.dripped += add
		f.due = e
	}
}

func (b *Bucket) closeFeed(i int) Closed {
	f := b.feeds[i]
	// What the other open feeds dripped backs that many tokens; only the
	// rest must go with this one, so a lease's end never takes the tokens
	// its successor has dripped (spends are not charged to the feeds still
	// open).
	var others int64
	for j := range b.nfeeds {
		if j != i {
			others += b.feeds[j].dripped
		}
	}
	withdrawn := min(f.dripped, max(b.tokens-others, 0))
	b.tokens -= withdrawn
	c := Closed{ID: f.id, Amount: f.amount, Unused: f.amount - f.dripped + withdrawn, Forgone: f.due - f.dripped}
	b.returned += c.Unused
	if b.rec != nil {
		b.rec.FeedClosed(c)
	}
	copy(b.feeds[i:b.nfeeds], b.feeds[i+1:b.nfeeds])
	b.nfeeds--
	b.feeds[b.nfeeds] = feed{} // drop the id string for the collector
	return c
}

// takeClosed hands out the closed feeds and empties the list, keeping its
// backing array for the next ones. b.mu must be held.
func (b *Bucket) takeClosed() []Closed {
	if len(b.closed) == 0 {
		return nil
	}
	out := make([]Closed, len(b.closed))
	copy(out, b.closed)
	clear(b.closed)
	b.closed = b.closed[:0]
	return out
}

// unixNanos converts t, reporting false outside the years UnixNano can
// represent, where it would silently wrap.
func unixNanos(t time.Time) (int64, bool) {
	if y := t.Year(); y < 1678 || y > 2261 {
		return 0, false
	}
	return t.UnixNano(), true
}

// mulDivSat returns a*b/c, or math.MaxInt64 if that does not fit.
func mulDivSat(a, b, c uint64) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, c)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
