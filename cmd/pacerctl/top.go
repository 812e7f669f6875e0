package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

// top ranks campaigns by their SPENDs a second across the fleet, from the
// demand counts every daemon adds to the ledger (lease.DemandKey: SPEND
// requests and micros asked per quarter-hour slot of the campaign's local
// day). A daemon flushes its counts once a minute (a sparse campaign's every
// five), so the current slot alone is up to a minute behind and, early in
// the slot, noisy: a campaign's rate is taken over the slot before the
// current one and the current one so far, 15 to 30 minutes.

// Defaults of top's flags (pacerctl top -h quotes them; a test checks).
const (
	defaultTopLimit = 20
	minTopWatch     = time.Second
	// topReaders bounds the campaigns whose demand is read at once.
	topReaders = 8
)

// topView is one round of top, and its JSON.
type topView struct {
	At string `json:"at"`
	// Campaigns are the busiest first, at most --limit of them; campaigns
	// without SPENDs in their window are left out.
	Campaigns []topCampaign `json:"campaigns"`
	// Reporting counts the campaigns with SPENDs in their window, Known all
	// campaigns in the ledger; SpendsPerSecond is the reporting ones' sum.
	Reporting       int     `json:"reporting"`
	Known           int     `json:"campaigns_known"`
	SpendsPerSecond float64 `json:"spends_per_second"`
}

// topCampaign is one campaign's recent demand.
type topCampaign struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Since is the start of the window the rates are over: the start of the
	// quarter-hour slot before the current one, in the campaign's local day.
	Since string `json:"since"`
	// Spends and AskedMicros are the fleet's SPEND requests (allowed or
	// not) and the micros they asked for, counted in the window.
	Spends               int64   `json:"spends"`
	AskedMicros          int64   `json:"asked_micros"`
	SpendsPerSecond      float64 `json:"spends_per_second"`
	AskedMicrosPerSecond int64   `json:"asked_micros_per_second"`
	// SharePPB is the campaign's part of the fleet's SPENDs a second, in
	// parts per billion.
	SharePPB int64 `json:"share_ppb"`

	since time.Time // Since, in the campaign's time zone
}

func (a *app) top(ctx context.Context, args []string) error {
	fs := newFlagSet("top")
	limit := fs.Int("limit", defaultTopLimit, "show at most this many campaigns (0: all)")
	watch := fs.Duration("watch", 0, "print the ranking again every DURATION (at least 1s) until interrupted; counts move once a minute")
	pos, err := a.parseArgs(fs, args, "[--limit N] [--watch DURATION]")
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("top: takes no arguments, got %q", pos)
	}
	if *limit < 0 {
		return usagef("top: --limit %d: want 0 (all) or more", *limit)
	}
	if *watch != 0 && *watch < minTopWatch {
		return usagef("top: --watch %v: want at least %v (daemons flush their counts once a minute)", *watch, minTopWatch)
	}
	for round := 0; ; round++ {
		if err := a.topRound(ctx, *limit, round, *watch != 0); err != nil {
			return err
		}
		if *watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: the rounds printed are the output
		case <-time.After(*watch):
		}
	}
}

// topRound reads and prints one ranking. --timeout bounds each round.
func (a *app) topRound(ctx context.Context, limit, round int, watching bool) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	l, cs, err := a.campaigns(ctx)
	if err != nil {
		return err
	}
	now := a.now()
	v, failed := a.topView(ctx, l, cs, now)
	if limit > 0 && len(v.Campaigns) > limit {
		v.Campaigns = v.Campaigns[:limit]
	}
	switch {
	case a.json && watching:
		// One object a line, so a consumer reads each round as it comes.
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s\n", b)
	case a.json:
		if err := a.printJSON(v); err != nil {
			return err
		}
	default:
		if round > 0 {
			fmt.Fprintln(a.stdout)
		}
		if err := a.printTop(v); err != nil {
			return err
		}
	}
	if failed > 0 && !watching {
		return errReported
	}
	return nil
}

// topView reads every campaign's recent demand and ranks them. A campaign
// whose demand cannot be read is named on stderr and left out; failed
// counts them.
func (a *app) topView(ctx context.Context, l *lease.Ledger, cs []lease.Campaign, now time.Time) (topView, int) {
	v := topView{At: now.UTC().Format(time.RFC3339), Campaigns: []topCampaign{}, Known: len(cs)}
	rows := make([]topCampaign, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(topReaders, len(cs)) {
		wg.Go(func() {
			for i := range next {
				rows[i], errs[i] = recentDemand(ctx, l, cs[i], now)
			}
		})
	}
	for i := range cs {
		next <- i
	}
	close(next)
	wg.Wait()
	failed := 0
	for i, r := range rows {
		if errs[i] != nil {
			a.warnf("campaign %s: %v", cs[i].ID, errs[i])
			failed++
			continue
		}
		if r.Spends > 0 {
			v.Campaigns = append(v.Campaigns, r)
			v.SpendsPerSecond += r.SpendsPerSecond
		}
	}
	v.Reporting = len(v.Campaigns)
	for i := range v.Campaigns {
		v.Campaigns[i].SharePPB = int64(math.Round(v.Campaigns[i].SpendsPerSecond / v.SpendsPerSecond * float64(bucket.PPB)))
	}
	slices.SortFunc(v.Campaigns, func(x, y topCampaign) int {
		if c := cmp.Compare(y.SpendsPerSecond, x.SpendsPerSecond); c != 0 {
			return c
		}
		return cmp.Compare(x.ID, y.ID)
	})
	return v, failed
}

// demandWindow returns the window top measures a campaign's rate over at
// now: the current quarter-hour slot of its local day and the one before,
// which at midnight is the previous day's last.
type demandWindow struct {
	since          time.Time
	day, prevDay   string
	slot, prevSlot int
}

func windowAt(now time.Time, loc *time.Location) demandWindow {
	day := bucket.DayOf(now, loc)
	slot := slotOf(now, day)
	w := demandWindow{day: day.Key, slot: slot, prevDay: day.Key, prevSlot: slot - 1}
	if slot == 0 {
		prev := bucket.DayOf(day.Start.Add(-time.Nanosecond), loc)
		w.prevDay, w.prevSlot = prev.Key, lease.DemandSlots-1
		w.since = slotStart(prev, w.prevSlot)
	} else {
		w.since = slotStart(day, w.prevSlot)
	}
	return w
}

// slotOf is the demand slot of day that t falls in, as daemons count it.
func slotOf(t time.Time, day bucket.Day) int {
	s := int(int64(t.Sub(day.Start)) * lease.DemandSlots / int64(day.Length()))
	return min(max(s, 0), lease.DemandSlots-1)
}

func slotStart(day bucket.Day, slot int) time.Time {
	return day.Start.Add(time.Duration(int64(day.Length()) * int64(slot) / lease.DemandSlots))
}

// recentDemand reads campaign c's SPEND requests in its window at now.
func recentDemand(ctx context.Context, l *lease.Ledger, c lease.Campaign, now time.Time) (topCampaign, error) {
	w := windowAt(now, c.Location())
	r := topCampaign{ID: c.ID, State: c.State, Since: w.since.Format(time.RFC3339), since: w.since}
	cur, _, err := l.ReadDemand(ctx, c.ID, w.day)
	if err != nil {
		return r, err
	}
	prev := cur
	if w.prevDay != w.day {
		if prev, _, err = l.ReadDemand(ctx, c.ID, w.prevDay); err != nil {
			return r, err
		}
	}
	var ok bool
	if r.Spends, ok = addCounts(cur.Requests[w.slot], prev.Requests[w.prevSlot]); !ok {
		return r, fmt.Errorf("demand counts past int64 (%d + %d requests)", cur.Requests[w.slot], prev.Requests[w.prevSlot])
	}
	if r.AskedMicros, ok = addCounts(cur.MicrosAsked[w.slot], prev.MicrosAsked[w.prevSlot]); !ok {
		return r, fmt.Errorf("demand counts past int64 (%d + %d micros asked)", cur.MicrosAsked[w.slot], prev.MicrosAsked[w.prevSlot])
	}
	ms := max(now.Sub(w.since).Milliseconds(), 1)
	r.SpendsPerSecond = float64(r.Spends) * 1000 / float64(ms)
	// Integer micros a second, rounded down, without overflow: q*1000 +
	// rem*1000/ms, where rem < ms < 2^31.
	r.AskedMicrosPerSecond = satMul(r.AskedMicros/ms, 1000) + r.AskedMicros%ms*1000/ms
	return r, nil
}

// addCounts adds two counts ReadDemand returned (each >= 0) and reports
// whether the sum fits.
func addCounts(x, y int64) (int64, bool) {
	if x > math.MaxInt64-y {
		return 0, false
	}
	return x + y, true
}

func satMul(x, y int64) int64 {
	if x > math.MaxInt64/y {
		return math.MaxInt64
	}
	return x * y
}

// printTop prints one round as a table.
func (a *app) printTop(v topView) error {
	switch {
	case v.Known == 0:
		fmt.Fprintf(a.stdout, "%s: no campaigns in the ledger (--redis %s)\n", v.At, a.redisAddrs)
		return nil
	case v.Reporting == 0:
		fmt.Fprintf(a.stdout, "%s: no SPENDs reported for any of %d campaigns in the last 15 to 30 minutes.\n"+
			"Daemons add their SPEND counts to the ledger once a minute (a campaign with few SPENDs every\n"+
			"5 minutes): is a pacerd running against this Redis, and are bidders sending it SPENDs?\n", v.At, v.Known)
		return nil
	}
	fmt.Fprintf(a.stdout, "%s: %d of %d campaigns reported SPENDs, %s a second in all\n", v.At, v.Reporting, v.Known, formatRate(v.SpendsPerSecond))
	tw := a.table()
	fmt.Fprintln(tw, "CAMPAIGN\tSPEND/S\tSHARE\tASKED/S\tSTATE\tSINCE")
	for _, c := range v.Campaigns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, formatRate(c.SpendsPerSecond), percent(c.SharePPB),
			formatUnits(c.AskedMicrosPerSecond), c.State, c.since.Format("15:04 MST"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.Reporting > len(v.Campaigns) {
		fmt.Fprintf(a.stdout, "(%d more; --limit 0 shows all)\n", v.Reporting-len(v.Campaigns))
	}
	return nil
}

// formatRate prints a rate with a precision that suits its size.
func formatRate(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 1:
		return strconv.FormatFloat(r, 'f', 1, 64)
	default:
		return strconv.FormatFloat(r, 'f', 3, 64)
	}
}
