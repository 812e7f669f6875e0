// Package daemon wires pacerd together: per-campaign token buckets fed by
// leases from the Redis ledger, the refill loop that sizes, renews and releases
// those leases ahead of demand, and the Spender that the RESP server calls.
//
// The hot path (Spend) touches only memory: a lock-free campaign lookup and the
// campaign-day's bucket. Everything that talks to Redis runs in Step, which Run
// calls every TickInterval and tests call directly with an injected clock.
//
// A campaign's code is split by job: campaign.go is the hot path (SPEND,
// REFUND, BALANCE), refill.go the refill and lease loop, demand.go demand
// accounting, day.go the campaign-day's state; schedule.go decides which
// campaigns step when. Config (config.go) is pacerd's one daemon
// configuration, with its defaults and checks; the config file decodes into
// it. Open (open.go) assembles a running daemon from it, as pacerd, the
// simulator and the fleet tests use it; New builds one on a ledger the caller
// owns. A Daemon's goroutines (first-use loads, Warm, and Open's refill loop
// and ledger gate) run on its lifetime, which Close ends and waits for before
// releasing leases. The reconciler and the election live in package
// reconcile, the broadcasts in package broadcast, the domain words (Decision,
// Balance, Event) in package pacer.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// Daemon is one pacerd's state. It is safe for concurrent use. Create it with
// New, call Run (or Step, in tests), and Close to release every lease.
type Daemon struct {
	cfg    Config
	ledger *lease.Ledger
	log    *zap.Logger
	bootID string

	campaigns campaignSet
	auctions  *auctionMemory
	loads     sync.Map // campaign id -> *load (first-use loads in flight)
	loadSlots chan struct{}
	unknown   *unknownCampaigns
	ran       *runTotals // this run's totals on each shard-day

	// The refill loop (Step): its schedule, the change stream it follows,
	// and the campaigns it dropped for idleness.
	stepMu        sync.Mutex
	dueBuf        []*campaign
	changes       changeFollower
	retiredMu     sync.Mutex
	retiring      []*campaign
	retiredCounts decisionCounts // SPEND answers of campaigns dropped
	// nextWatermarkRead: the idle check reads the watermarks no sooner
	// (idlecheck.go).
	nextWatermarkRead time.Time
	// eventKick wakes Run when an operator's event names a settings version
	// newer than any seen (HandleEvent): its campaigns are stepped at once,
	// not at the next tick.
	eventKick chan struct{}

	leaseSeq atomic.Uint64
	counters counters
	opCounts opCounts
	metrics  *metrics
	closed   atomic.Bool

	// The daemon's lifetime: first-use loads and Warm run on life, which
	// Close cancels, and Close waits for them (work) before it releases
	// leases, so a load finishing late cannot leave a lease nobody
	// releases. workMu orders work.Add against Close's closed.Store.
	life    context.Context
	endLife context.CancelFunc
	workMu  sync.Mutex
	work    sync.WaitGroup

	// opened is what Open started beside the daemon (nil after New).
	opened *opened
}

type counters struct {
	spendErrors                   atomic.Int64
	refunds, refundsUnbacked      atomic.Int64
	ledgerCalls, ledgerErrors     atomic.Int64
	leasesGranted, leasesReleased atomic.Int64
	lostWrites, leasesReasserted  atomic.Int64
	campaignsDropped              atomic.Int64
	// sparseFetches: leases fetched for a sparse campaign's SPEND
	// (SparseWait); sparseFetchesLate: of those, answered after the SPEND
	// had stopped waiting (it was paced).
	sparseFetches, sparseFetchesLate atomic.Int64
	// unaskedBucketFull: leases not asked for because every feed of the
	// campaign's bucket was open (bucket.MaxFeeds; condition 13).
	unaskedBucketFull atomic.Int64
}

// New returns a Daemon using ledger.
func New(ledger *lease.Ledger, cfg Config) (*Daemon, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("daemon config: %w", err)
	}
	d := &Daemon{
		cfg:      cfg,
		auctions: newAuctionMemory(cfg.DedupWindow, cfg.DedupMemoryBytes),
		metrics:  newMetrics(),
		ledger:   ledger,
		log:      cfg.Logger.Named("daemon"),
		bootID:   newBootID(),
	}
	d.eventKick = make(chan struct{}, 1)
	d.ran = newRunTotals(cfg.Clock.Now)
	d.loadSlots = make(chan struct{}, cfg.MaxCampaignLoads)
	d.life, d.endLife = context.WithCancel(context.Background())
	d.unknown = newUnknownCampaigns(cfg.UnknownCampaignTTL, defaultUnknownEntries)
	return d, nil
}

// newBootID returns this run's part of its lease ids (holder-bootID-seq):
// 64 random bits, in base 36 (at most 13 characters). Ids are unique by
// construction, not by the clock: two runs with one holder name (duplicate
// hostnames, a fleet embedded in one process on one fake clock) would
// otherwise take the same ids, and the ledger would answer the second's
// grant with the first's lease, counting once what both spend. Among n runs
// of one holder, two share a boot id with probability about n²/2^65.
func newBootID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 36)
}

// firstLoadTimeout bounds how long the first SPEND of a campaign waits for its
// settings and first lease.
const firstLoadTimeout = 2 * time.Second

type load struct {
	done chan struct{}
	c    *campaign
	err  error
}

// campaignFor returns the campaign's state, loading it on first use. Loads
// are deduplicated: a burst of first SPENDs for one campaign makes one load,
// which the others wait for (bounded by firstLoadTimeout). At most
// MaxCampaignLoads loads run at once; a first use beyond that is refused
// with a retry error, without a ledger read. Ids the ledger does not know
// are answered from d.unknown (see unknownCampaigns).
func (d *Daemon) campaignFor(id string, firstAmount int64) (*campaign, error) {
	return d.campaignForWaiting(id, firstAmount, false)
}

// campaignForWaiting is campaignFor; with waitSlot, a load waits for a free
// slot instead of being refused (Warm loads many campaigns at once).
func (d *Daemon) campaignForWaiting(id string, firstAmount int64, waitSlot bool) (*campaign, error) {
	if c, ok := d.campaigns.get(id); ok {
		return c, nil
	}
	unknown, wait := d.unknown.unknown(id, d.cfg.Clock.Now())
	if wait != nil {
		// The set of campaign ids is being read: it will answer.
		select {
		case <-wait:
		case <-time.After(firstLoadTimeout):
			return nil, fmt.Errorf("campaign %q: settings not loaded yet (ledger slow or unreachable)", id)
		}
		unknown, _ = d.unknown.unknown(id, d.cfg.Clock.Now())
	}
	if unknown || !lease.ValidCampaignID(id) {
		return nil, &lease.UnknownCampaignError{ID: id}
	}
	if d.closed.Load() {
		return nil, errors.New("pacerd is shutting down")
	}
	l := &load{done: make(chan struct{})}
	if other, loaded := d.loads.LoadOrStore(id, l); loaded {
		l = other.(*load)
	} else {
		d.startLoad(id, l, firstAmount, waitSlot)
	}
	select {
	case <-l.done:
		return l.c, l.err
	case <-time.After(firstLoadTimeout):
		return nil, fmt.Errorf("campaign %q: settings not loaded yet (ledger slow or unreachable)", id)
	}
}

// startLoad starts the load l of campaign id on a goroutine Close waits
// for, once a load slot is free (waitSlot) or if one is free now; otherwise,
// or once Close has begun, it ends l with an error.
func (d *Daemon) startLoad(id string, l *load, firstAmount int64, waitSlot bool) {
	fail := func(err error) {
		d.loads.Delete(id)
		l.err = err
		close(l.done)
	}
	if waitSlot {
		select {
		case d.loadSlots <- struct{}{}: // loads end within their ledger timeouts
		case <-d.life.Done():
			fail(errors.New("pacerd is shutting down"))
			return
		}
	} else {
		select {
		case d.loadSlots <- struct{}{}:
		default:
			fail(fmt.Errorf("campaign %q: %d campaigns being loaded already; retry", id, cap(d.loadSlots)))
			return
		}
	}
	if !d.track() {
		<-d.loadSlots
		fail(errors.New("pacerd is shutting down"))
		return
	}
	go func() {
		defer d.work.Done()
		d.load(id, l, firstAmount)
	}()
}

// track counts one more goroutine Close must wait for, and reports false
// (counting nothing) once Close has begun.
func (d *Daemon) track() bool {
	d.workMu.Lock()
	defer d.workMu.Unlock()
	if d.closed.Load() {
		return false
	}
	d.work.Add(1)
	return true
}

// load reads the campaign's settings and primes its first lease, sized for
// at least a few SPENDs of firstAmount (the call that triggered the load).
func (d *Daemon) load(id string, l *load, firstAmount int64) {
	defer func() { <-d.loadSlots }()
	defer d.loads.Delete(id)
	defer close(l.done)
	ctx, cancel := context.WithTimeout(d.life, d.cfg.LedgerTimeout)
	defer cancel()
	start := time.Now()
	settings, err := d.ledger.GetCampaign(ctx, id)
	var unknown *lease.UnknownCampaignError
	if errors.As(err, &unknown) {
		d.observeLedger("refresh", start, nil)
	} else {
		d.observeLedger("refresh", start, err)
	}
	if err != nil {
		l.err = err
		if errors.As(err, &unknown) && d.unknown.missed(id, d.cfg.Clock.Now()) {
			// Many ids missing: read the set of ids once instead.
			start := time.Now()
			ids, err := d.ledger.CampaignIDs(ctx)
			d.observeLedger("refresh", start, err)
			if ids == nil && err == nil {
				ids = []string{}
			}
			d.unknown.setKnown(ids, d.cfg.Clock.Now())
		}
		return
	}
	c := newCampaign(d, settings)
	c.maxAmount.Store(firstAmount)
	// The change stream's position is read once, after the first campaign
	// that exists (unknown ids cost no more than their one read): a change
	// stored between that campaign's read and the position would be missed,
	// so that campaign reads its settings again on its first step. Every
	// campaign loaded later reads its settings after the position, and a
	// change stored after its read is found by followChanges.
	if fresh, _ := d.startPosition(ctx); fresh {
		c.markStale()
	}
	l.c = d.campaigns.add(c)
	// Prime the first lease now, so the first SPEND finds tokens.
	l.c.step(ctx, d.cfg.Clock.Now())
}

// Spend is SpendAt at the daemon's clock now: may the campaign spend
// amount micros on this auction? It never waits on the network, except for
// the first SPEND of a campaign this daemon has not seen, which waits for
// the campaign's settings, and a sparse campaign's fetch (SparseWait).
func (d *Daemon) Spend(campaignID pacer.CampaignID, amountMicros pacer.Micros, auctionID string) (pacer.Decision, error) {
	dec, _, err := d.spendAt(d.cfg.Clock.Now(), campaignID, amountMicros, auctionID, true)
	return dec, err
}

// Now is the daemon's clock: the socket server reads it once for a batch
// of pipelined SPENDs (transport.ClockedSpender).
func (d *Daemon) Now() time.Time { return d.cfg.Clock.Now() }

// SpendAt is Spend decided at now, a reading of Now the socket server took
// a few SPENDs earlier in the same batch (transport.ClockedSpender says
// why that is safe for money). A campaign that must be loaded first, which
// may wait on the ledger, is decided at a fresh reading instead; SpendAt
// returns the instant it decided at.
func (d *Daemon) SpendAt(now time.Time, campaignID pacer.CampaignID, amountMicros pacer.Micros, auctionID string) (pacer.Decision, time.Time, error) {
	return d.spendAt(now, campaignID, amountMicros, auctionID, true)
}

// SpendAtNoWait is SpendAt for a caller that must not wait (the socket
// server's event loops): a SPEND whose answer would wait on the ledger (its
// campaign is not loaded, or it would fetch a sparse campaign's lease)
// returns pacer.ErrWouldWait, deciding and counting nothing, for the caller
// to ask SpendAt from a goroutine that may wait.
func (d *Daemon) SpendAtNoWait(now time.Time, campaignID pacer.CampaignID, amountMicros pacer.Micros, auctionID string) (pacer.Decision, time.Time, error) {
	return d.spendAt(now, campaignID, amountMicros, auctionID, false)
}

// spendAt is the one decision body of a SPEND, however it came (Spend,
// SpendAt, SpendAtNoWait): the bucket decides; a sparse campaign's SPEND
// that found it short fetches what it lacks and is decided again, as one.
func (d *Daemon) spendAt(now time.Time, campaignID pacer.CampaignID, amountMicros pacer.Micros, auctionID string, wait bool) (pacer.Decision, time.Time, error) {
	amount := int64(amountMicros)
	c, loaded := d.campaigns.get(string(campaignID))
	if !loaded {
		if !wait {
			return pacer.Paced, now, pacer.ErrWouldWait
		}
		var err error
		if c, err = d.campaignFor(string(campaignID), amount); err != nil {
			d.counters.spendErrors.Add(1)
			return pacer.Paced, now, err
		}
		now = d.cfg.Clock.Now()
	}
	d.fence(now)
	dec := c.spend(now, amount, auctionID)
	// A sparse campaign's SPEND that found the bucket short fetches a lease
	// of what it lacks (SparseWait); it is then decided again, as one SPEND.
	if dec == pacer.Paced && d.cfg.SparseWait > 0 && c.sparseNow.Load() && c.fetchable(now) {
		if !wait {
			c.forgetDenial(amount)
			return pacer.Paced, now, pacer.ErrWouldWait
		}
		if c.fetchFor(now, amount) {
			dec = c.spendAgain(now, amount, auctionID)
		}
	}
	if dec != pacer.Allowed {
		c.countDenial(dec)
	}
	return dec, now, nil
}

// fence keeps the lease journal's promise before a SPEND at now: no SPEND
// beyond the journal's last fence (Journal.Fence). The refill loop keeps
// the fence ahead of the clock; a SPEND writes one only while that loop
// is stalled.
func (d *Daemon) fence(now time.Time) {
	if j := d.cfg.Journal; j != nil && !j.Covers(now) {
		j.Extend(now)
	}
}

// decisionCounts sums the campaigns' SPEND answers.
type decisionCounts struct{ allowed, paced, exhausted int64 }

func (d *Daemon) decisions() decisionCounts {
	// Under retiredMu, so that a campaign being dropped is counted once:
	// either loaded or in retiredCounts.
	d.retiredMu.Lock()
	defer d.retiredMu.Unlock()
	n := d.retiredCounts
	now := d.cfg.Clock.Now()
	for _, c := range d.campaigns.all() {
		n.allowed += c.allows(now)
		n.paced += c.paced.Load()
		n.exhausted += c.exhausted.Load()
	}
	return n
}

// Refund implements transport.Spender.
func (d *Daemon) Refund(campaignID pacer.CampaignID, amountMicros pacer.Micros, auctionID string) error {
	amount := int64(amountMicros)
	c, err := d.campaignFor(string(campaignID), 0)
	if err != nil {
		return err
	}
	accepted, err := c.refund(d.cfg.Clock.Now(), amount, auctionID)
	if err != nil {
		return err
	}
	d.counters.refunds.Add(1)
	if accepted < amount {
		d.counters.refundsUnbacked.Add(amount - accepted)
	}
	return nil
}

// Balance implements transport.Spender.
func (d *Daemon) Balance(campaignID pacer.CampaignID) (pacer.Balance, error) {
	c, err := d.campaignFor(string(campaignID), 0)
	if err != nil {
		return pacer.Balance{}, err
	}
	return c.balance(d.cfg.Clock.Now()), nil
}

// Status is the daemon's headline totals, for a one-line status such as
// systemd's STATUS= (INFO and the metrics say more).
type Status struct {
	Campaigns, LeasesHeld    int
	SpendAllowed, SpendPaced int64
	SpendExhausted           int64
	LedgerErrors             int64
}

// Status returns the daemon's headline totals now. It takes each campaign's
// loop lock in turn (for its lease count): cheap, but not for the hot path.
func (d *Daemon) Status() Status {
	dec := d.decisions()
	st := Status{SpendAllowed: dec.allowed, SpendPaced: dec.paced, SpendExhausted: dec.exhausted,
		LedgerErrors: d.counters.ledgerErrors.Load()}
	for _, c := range d.campaigns.all() {
		st.Campaigns++
		st.LeasesHeld += c.leaseCount()
	}
	return st
}

// Info is the daemon's counters, a line each, for the socket's INFO.
func (d *Daemon) Info() []pacer.InfoField {
	st := d.Status()
	i := func(k string, v int64) pacer.InfoField {
		return pacer.InfoField{Key: k, Value: strconv.FormatInt(v, 10)}
	}
	return []pacer.InfoField{
		{Key: "holder", Value: d.cfg.Holder},
		i("campaigns", int64(st.Campaigns)),
		i("leases_held", int64(st.LeasesHeld)),
		i("spend_allowed", st.SpendAllowed),
		i("spend_paced", st.SpendPaced),
		i("spend_exhausted", st.SpendExhausted),
		i("spend_errors", d.counters.spendErrors.Load()),
		i("refunds", d.counters.refunds.Load()),
		i("refunds_unbacked_micros", d.counters.refundsUnbacked.Load()),
		i("ledger_calls", d.counters.ledgerCalls.Load()),
		i("ledger_errors", st.LedgerErrors),
		i("leases_granted", d.counters.leasesGranted.Load()),
		i("sparse_fetches", d.counters.sparseFetches.Load()),
		i("sparse_fetches_late", d.counters.sparseFetchesLate.Load()),
		i("leases_unasked_bucket_full", d.counters.unaskedBucketFull.Load()),
		i("leases_released", d.counters.leasesReleased.Load()),
		i("ledger_lost_writes", d.counters.lostWrites.Load()),
		i("leases_reasserted", d.counters.leasesReasserted.Load()),
		i("campaigns_dropped", d.counters.campaignsDropped.Load()),
	}
}

// Step runs one round of the refill loop at the clock's current time: every
// CampaignRefresh, one read of the ledger's change stream for all campaigns;
// then settings refresh, day rollover, lease renewal and release for every
// campaign that is due (see schedule.go). Due campaigns run concurrently, on
// a bounded number of goroutines, so one campaign stuck on a slow shard does
// not hold the others back. Campaigns unused for CampaignIdle are dropped.
func (d *Daemon) Step(ctx context.Context) {
	d.stepMu.Lock()
	defer d.stepMu.Unlock()
	now := d.cfg.Clock.Now()
	if d.changes.last.IsZero() || now.Sub(d.changes.last) >= d.cfg.CampaignRefresh {
		d.changes.last = now
		d.followChanges(ctx)
	}
	if d.cfg.Journal != nil {
		d.cfg.Journal.Fence(now) // before any SPEND beyond it (Reclaim)
	}
	d.runDue(ctx, now)
	d.reassertAsked(ctx, now)
	d.checkIdleShards(ctx, now)
	forget := now.UTC().Add(-48 * time.Hour).Format(time.DateOnly)
	d.ran.forgetBefore(forget)
	if d.cfg.Journal != nil {
		d.cfg.Journal.forgetSpentBefore(forget, now)
	}
	d.removeRetired(now)
	d.metrics.lastStep.Store(time.Now().UnixNano())
}

// Run calls Step every TickInterval until ctx is cancelled. Between ticks,
// an operator's event naming a newer settings version steps its campaigns
// at once (stepEvents), at most once per eventStepGap: a pause or resume
// reaches the daemon a NATS hop and a settings read after pacerctl, not a
// tick later, and a flood of such events costs at most TickInterval /
// eventStepGap extra steps of the campaigns they name per tick.
func (d *Daemon) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.TickInterval)
	defer t.Stop()
	gap := eventStepGap(d.cfg.TickInterval)
	var lastEvents time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.Step(ctx)
		case <-d.eventKick:
			if wait := gap - time.Since(lastEvents); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
			lastEvents = time.Now()
			d.stepEvents(ctx)
		}
	}
}

// eventStepGap is the least time between two event steps of Run: a tenth
// of a tick.
func eventStepGap(tick time.Duration) time.Duration { return tick / 10 }

// stepEvents steps, at the clock's now, the campaigns an operator's event
// named a settings version of newer than any seen (campaign.noteVersion).
// Their step re-reads the settings first (housekeep), whatever the rate
// limit on other events.
func (d *Daemon) stepEvents(ctx context.Context) {
	d.stepMu.Lock()
	defer d.stepMu.Unlock()
	now := d.cfg.Clock.Now()
	named := d.dueBuf[:0]
	d.campaigns.each(func(c *campaign) {
		if c.newVersion.Load() {
			named = append(named, c)
		}
	})
	d.dueBuf = named
	d.stepAll(ctx, now, named)
	clear(named)
}

// Close stops taking new campaigns, cancels the loads and Warm in flight and
// waits for them, then drops every bucket and releases every lease, returning
// unused micros to the ledger at once. It returns the first release error;
// leases it could not release are settled by the ledger after their expiry.
// A daemon from Open has its refill loop and ledger gate stopped first, and
// its journal, broadcaster and Redis client closed last: once Close returns,
// no goroutine Open started is left.
func (d *Daemon) Close(ctx context.Context) error {
	if d.opened != nil {
		d.opened.stopLoops()
		defer d.opened.close()
	}
	d.workMu.Lock()
	d.closed.Store(true)
	d.workMu.Unlock()
	d.endLife()
	d.work.Wait()
	now := d.cfg.Clock.Now()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for _, c := range d.campaigns.all() {
		wg.Go(func() {
			if err := c.shutdown(ctx, now); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	d.checkAllWaiting(ctx, now)
	return first
}

// checkAllWaiting is a clean stop's idle check (idlecheck.go): every
// shard-day still waiting for its check, this run's and those it inherited,
// is checked now, whether or not its master's watermark has moved. A
// restore already made is found by this run rather than left to the next
// one on this host's journal, which a host taken out of service never
// starts; one made later is the watermark's to find. Bounded by two ledger
// timeouts in all: a Redis that does not answer does not hold the stop.
func (d *Daemon) checkAllWaiting(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 2*d.cfg.LedgerTimeout)
	defer cancel()
	for _, k := range d.ran.quietShards(now) {
		if ctx.Err() != nil {
			return
		}
		d.checkShard(ctx, now, k, now)
	}
}

// Campaigns returns the ids of the campaigns this daemon has loaded.
func (d *Daemon) Campaigns() []string {
	var ids []string
	for _, c := range d.campaigns.all() {
		ids = append(ids, c.id)
	}
	return ids
}

// Warm loads the given campaigns and primes their first leases (pacerd calls it
// at start with the campaigns of its last run, before it reports ready). Close
// cancels it and waits for it to return.
func (d *Daemon) Warm(ids []string) {
	if !d.track() {
		return
	}
	defer d.work.Done()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { _, _ = d.campaignForWaiting(id, 0, true) })
	}
	wg.Wait()
}

func (d *Daemon) journalGranted(jl JournalLease) {
	if d.cfg.Journal == nil {
		return
	}
	if err := d.cfg.Journal.Granted(jl); err != nil {
		d.log.Warn("cannot journal a lease; a crash would cost all of it", zap.String("lease", jl.ID), zap.Error(err))
	}
}

// journalClosed records that a lease is closed, the ledger having taken
// back returned of its micros (0: it was settled, or its day is gone).
func (d *Daemon) journalClosed(id string, returned int64) {
	if d.cfg.Journal != nil {
		d.cfg.Journal.Released(id, returned)
	}
}

// returnedBy is what the ledger took back of a lease released with unused
// micros by a call whose release half happened and returned err: nothing
// if it had settled the lease as spent first.
func returnedBy(err error, unused int64) int64 {
	if errors.Is(err, lease.ErrLeaseSettled) {
		return 0
	}
	return unused
}

// newDayBucket returns a new bucket for a campaign-day. With a journal, it
// records what its SPENDs take and its leases into the journal's spent
// map, so that a crash of this run gives back exactly what they held
// unspent (Reclaim).
func (d *Daemon) newDayBucket(campaign, day string, capacityMicros int64) *bucket.Bucket {
	b := bucket.New(capacityMicros)
	if d.cfg.Journal != nil {
		d.cfg.Journal.record(b, d.bootID, campaign, day, d.cfg.Clock.Now())
	}
	return b
}
