package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DemandSlots is how many slots of the local day observed demand is counted
// in (15 minutes each on a 24 h day; DST days stretch them, as curves do).
const DemandSlots = 96

// DemandKey is the hash where daemons add up a campaign-day's observed demand:
// fields req:<slot> (SPEND calls), ok:<slot> (allowed), no:<slot> (denied)
// and reqm:<slot> (micros asked for), slot 0 to DemandSlots-1. pacerctl curve
// fit reads it.
func DemandKey(campaign, day string) string { return keyPrefix + "demand:" + campaign + ":" + day }

// RecentDemandKey is the hash where daemons count a campaign-day's micros
// asked by the minute each flush was counted in, for their shares of the
// fleet's demand: a ring of RecentMinutes fields, "r<m mod RecentMinutes>"
// = "<m>|<micros>", m a Unix minute, each holding the latest minute counted
// there. Its hash tag is the demand hash's whole name, so that one script
// writes both on a Redis Cluster (campaign ids hold no braces).
func RecentDemandKey(campaign, day string) string {
	return keyPrefix + "recent:{" + DemandKey(campaign, day) + "}"
}

// RecentMinutes is how many minutes the ring of recent demand holds
// (RecentDemandKey): a span a flush asks for (Recent) starts fewer than
// this many minutes before the flush's own.
const RecentMinutes = 16

// Demand is what a daemon saw of one slot since its last flush.
type Demand struct {
	Slot                int
	Requests, Allowed   int64
	Denied, MicrosAsked int64
	// BidMicros, if positive, is the campaign's bid size as the daemon sees
	// it (its largest recent SPEND). The latest one sizes the shard count of
	// the campaign's next days (see DayPlan).
	BidMicros int64
	// Fleet asks AddDemand for the fleet's latest SPENDs (FleetAsked.Spends
	// and Micros); without it they are 0, and the flush reads no slot but
	// the one before its own.
	Fleet bool
}

// Recent is what a flush counts in, and reads back from, the ring of
// recent minutes (RecentDemandKey). Minute is the flush's Unix minute
// (0: the ring is neither written nor read); the flush's micros asked, of
// all its counts, are added to it. From and To are the minutes whose
// fleet's micros asked it returns (FleetAsked.Span; From 0: none), whole
// minutes before Minute, From more than Minute - RecentMinutes.
type Recent struct{ Minute, From, To int64 }

func (r Recent) validate() error {
	switch {
	case r.Minute < 0 || r.Minute > math.MaxInt32*60:
		return fmt.Errorf("minute %d out of range", r.Minute)
	case r.From == 0:
		return nil
	case r.Minute == 0 || r.From < 0 || r.From > r.To || r.To >= r.Minute || r.Minute-r.From >= RecentMinutes:
		return fmt.Errorf("minutes %d..%d: want whole minutes before %d, from after %d", r.From, r.To, r.Minute, r.Minute-RecentMinutes)
	}
	return nil
}

//go:embed lua/demand.lua
var luaDemand string

var demandScript = redis.NewScript(luaDemand)

// AddDemand adds a daemon's counts to the campaign-day's demand hash in one
// script call (daemons call it in batches, never per SPEND), plus one write
// of the bid if a count carries one (daemons send it only when it changed);
// and, with rc.Minute, their micros asked to that minute of the ring of
// recent minutes. It returns the fleet's micros asked in the last count's
// slot and the slot before, and, if a count asks for them (Demand.Fleet),
// the fleet's latest SPENDs and their micros asked, and the fleet's micros
// asked in the minutes rc asks for (FleetAsked). Not retried: a count whose
// reply was lost may have been added.
func (l *Ledger) AddDemand(ctx context.Context, campaign, day string, dayStart time.Time, rc Recent, ds ...Demand) (FleetAsked, error) {
	if len(ds) == 0 {
		return FleetAsked{}, nil
	}
	if err := rc.validate(); err != nil {
		return FleetAsked{}, fmt.Errorf("ledger %s/%s: demand: %w", campaign, day, err)
	}
	enough := 0
	for _, d := range ds {
		if d.Fleet {
			enough = FleetSpends
		}
	}
	args := make([]any, 0, 5+5*len(ds))
	args = append(args, dayStart.Add(48*time.Hour+l.cfg.Retention).UnixMilli(), enough, rc.Minute, rc.From, rc.To)
	var bid int64
	for _, d := range ds {
		args = append(args, d.Slot, d.Requests, d.Allowed, d.Denied, d.MicrosAsked)
		if d.BidMicros > 0 {
			bid = min(d.BidMicros, MaxBudgetMicros)
		}
	}
	// The bid first: it is idempotent, the counts are not, so a failure
	// between the two leaves nothing a retry would add twice.
	if bid > 0 {
		if err := l.rdb.HSet(ctx, daysKey(campaign), bidField, bid).Err(); err != nil {
			return FleetAsked{}, fmt.Errorf("ledger %s: bid: %w", campaign, err)
		}
	}
	keys := []string{DemandKey(campaign, day), RecentDemandKey(campaign, day)}
	r, err := demandScript.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err != nil {
		return FleetAsked{}, fmt.Errorf("ledger %s/%s: demand: %w", campaign, day, err)
	}
	if len(r) != 6 {
		return FleetAsked{}, fmt.Errorf("ledger %s/%s: demand: %d values in the reply, want 6", campaign, day, len(r))
	}
	return FleetAsked{Slot: r[0], Before: r[1], Spends: r[2], Micros: r[3], Span: r[4], SpanMinutes: r[5]}, nil
}

// FleetSpends is how many of the fleet's latest SPENDs of a campaign-day a
// demand flush counts (FleetAsked.Spends): the slots from the flushed one
// back until they hold this many, or to the day's start. Enough that the
// days whose mean SPEND sizes the ledger's advance (budgets of fewer than
// about 130 mean bids) are mostly counted whole: over the latest 1,024
// SPENDs, a 50-bid budget asked 3,000 times a day by 10 hosts ran 4,002
// micros ahead of its curve where two mean bids are 4,000 (its latest 1,048
// SPENDs asked 5% more than its day's); a busy campaign's flush reads a
// slot or two.
const FleetSpends = 4096

// FleetAsked is the fleet's micros asked in a slot of a campaign-day, as a
// demand flush (AddDemand) returns it. Slot is the flushed slot's so far,
// that flush's counts included: the other hosts' are up to their flush
// interval behind, so a host's part of it errs high (a host flushing every
// 5 minutes, early in a slot, had twice its share). Before is the slot
// before it, which is complete once its time is over: every host has
// flushed what it saw then (each flush counts in the slot of its time).
// Spends and Micros are the fleet's SPENDs and their micros asked over the
// slots from the flushed one back, until they count FleetSpends SPENDs or
// reach the day's start: every host's, each as of its last flush, for the
// campaign's mean SPEND (the pacing controller's condition 21). A host
// whose gate refuses leases counts its SPENDs but not their micros, so
// while it serves none the mean errs low. Span is the fleet's micros asked
// in the minutes the flush asked for (Recent), each flush counted in the
// minute of its own time, whatever order the flushes reached the ledger
// in; SpanMinutes, how many of those minutes the ring held a count for.
type FleetAsked struct {
	Slot, Before      int64
	Spends, Micros    int64
	Span, SpanMinutes int64
}

// SetBid records campaign's bid size (micros per SPEND, such as the bidder's
// usual maximum bid) for sizing the shard count of the days it opens next
// (see BidsPerShard). Daemons keep it current from the SPENDs they see; an
// operator sets it for a new campaign, whose first day no daemon has seen.
func (l *Ledger) SetBid(ctx context.Context, campaign string, micros int64) error {
	if micros <= 0 || micros > MaxBudgetMicros {
		return fmt.Errorf("ledger %s: bid %d micros out of range 1..%d", campaign, micros, int64(MaxBudgetMicros))
	}
	if err := l.rdb.HSet(ctx, daysKey(campaign), bidField, micros).Err(); err != nil {
		return fmt.Errorf("ledger %s: bid: %w", campaign, err)
	}
	return nil
}

// Bid returns campaign's last recorded bid size (see SetBid), or 0 if none.
func (l *Ledger) Bid(ctx context.Context, campaign string) (int64, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), bidField).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("ledger %s: bid: %w", campaign, err)
	}
	return min(max(v, 0), MaxBudgetMicros), nil
}

// DayDemand is what a campaign-day's demand hash holds: per slot of the
// local day, SPEND calls (Requests) and micros asked; and the day's totals.
type DayDemand struct {
	Requests    [DemandSlots]int64
	MicrosAsked [DemandSlots]int64
	Total       struct{ Requests, Allowed, Denied int64 }
}

// ReadDemand reads campaign's demand for day; ok is false if none was
// recorded.
func (l *Ledger) ReadDemand(ctx context.Context, campaign, day string) (d DayDemand, ok bool, err error) {
	key := DemandKey(campaign, day)
	h, err := l.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return d, false, fmt.Errorf("ledger %s/%s: demand: %w", campaign, day, err)
	}
	for field, value := range h {
		kind, slotStr, found := strings.Cut(field, ":")
		slot, err := strconv.Atoi(slotStr)
		if !found || err != nil || slot < 0 || slot >= DemandSlots {
			return d, false, fmt.Errorf("%s: field %q: want req:, ok:, no: or reqm: and a slot from 0 to %d", key, field, DemandSlots-1)
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v < 0 {
			return d, false, fmt.Errorf("%s: field %s is %q, not a count", key, field, value)
		}
		switch kind {
		case "req":
			d.Requests[slot] += v
			d.Total.Requests += v
		case "ok":
			d.Total.Allowed += v
		case "no":
			d.Total.Denied += v
		case "reqm":
			d.MicrosAsked[slot] += v
		default:
			return d, false, fmt.Errorf("%s: unknown field %q", key, field)
		}
	}
	return d, len(h) > 0, nil
}

// DayCurve returns the fitted curve's weights a campaign with curve "auto"
// paces day by, if one was decided (see DecideDayCurve).
func (l *Ledger) DayCurve(ctx context.Context, campaign, day string) ([]float64, bool, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), day+":curve").Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("ledger %s/%s: day curve: %w", campaign, day, err)
	}
	w, err := parseWeights(v)
	if err != nil {
		return nil, false, fmt.Errorf("ledger %s/%s: day curve: %w", campaign, day, err)
	}
	return w, true, nil
}

// DecideDayCurve records weights as day's curve unless one was decided
// already, and returns the one that holds: every daemon paces the day by the
// same curve, decided once, like the day's plan.
func (l *Ledger) DecideDayCurve(ctx context.Context, campaign, day string, weights []float64) ([]float64, error) {
	parts := make([]string, len(weights))
	for i, w := range weights {
		parts[i] = strconv.FormatFloat(w, 'g', 10, 64)
	}
	key := daysKey(campaign)
	var got *redis.StringCmd
	if _, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, key, day+":curve", strings.Join(parts, ","))
		got = p.HGet(ctx, key, day+":curve")
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ledger %s/%s: day curve: %w", campaign, day, err)
	}
	w, err := parseWeights(got.Val())
	if err != nil {
		return nil, fmt.Errorf("ledger %s/%s: day curve: %w", campaign, day, err)
	}
	return w, nil
}

func parseWeights(s string) ([]float64, error) {
	fields := strings.Split(s, ",")
	w := make([]float64, len(fields))
	for i, f := range fields {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("weight %d: %q is not a number >= 0", i, f)
		}
		w[i] = v
	}
	return w, nil
}

// ClaimExhausted records that holder found campaign's day exhausted, and
// reports whether it was the first to: the fleet broadcasts the fact once,
// not once per daemon (every daemon still learns it from the shards).
func (l *Ledger) ClaimExhausted(ctx context.Context, campaign, day, holder string) (bool, error) {
	ok, err := l.rdb.HSetNX(ctx, daysKey(campaign), day+":exhausted", holder).Result()
	if err != nil {
		return false, fmt.Errorf("ledger %s/%s: exhausted claim: %w", campaign, day, err)
	}
	return ok, nil
}
