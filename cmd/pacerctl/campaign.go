package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// campaignView is a campaign with its balances for one day, as campaign get
// prints it. The balance fields are 0 when the day is not open.
type campaignView struct {
	lease.Campaign
	Day       string `json:"day"`
	DayOpen   bool   `json:"day_open"`
	Budget    int64  `json:"budget"`
	Spent     int64  `json:"spent"`
	Available int64  `json:"available"`
	Leased    int64  `json:"leased"`
	Locked    int64  `json:"locked"`
	Lost      int64  `json:"lost"`
	// CutPending is the part of a budget cut not applied yet because that
	// budget was already leased: it is taken from the leases' unused micros as
	// they come back. Budget less CutPending is what the day may spend.
	CutPending int64 `json:"cut_pending"`
}

// today returns the key of the local day of c's time zone at the app's now.
func (a *app) today(c lease.Campaign) string {
	return bucket.DayOf(a.now(), c.Location()).Key
}

// view reads c's balances for today.
func (a *app) view(ctx context.Context, l *lease.Ledger, c lease.Campaign) (campaignView, error) {
	v := campaignView{Campaign: c, Day: a.today(c)}
	t, open, err := l.OpenDayTotals(ctx, c.ID, v.Day)
	if err != nil || !open {
		return v, err
	}
	v.DayOpen = true
	v.Budget, v.Spent, v.Available, v.Leased, v.Locked, v.Lost, v.CutPending =
		t.Budget, t.Spent, t.Available, t.Leased, t.Locked, t.Lost, t.Owed
	return v, nil
}

// setResult is what campaign set did, for --json.
type setResult struct {
	Campaign lease.Campaign `json:"campaign"`
	Created  bool           `json:"created"`
	Today    *todayChange   `json:"today,omitempty"` // only when --daily was given
}

type todayChange struct {
	Day          string `json:"day"`
	Open         bool   `json:"open"`
	BudgetBefore int64  `json:"budget_before,omitempty"`
	BudgetAfter  int64  `json:"budget_after,omitempty"`
	Requested    int64  `json:"requested"`
	// CutPending: what the day still owes of cuts, taken from leases as they
	// come back.
	CutPending int64 `json:"cut_pending,omitempty"`
	// CarriedIn: what yesterday carried over; today's budget is the daily
	// budget plus this.
	CarriedIn int64 `json:"carried_in,omitempty"`
}

// setRequest is campaign set's command line: the fields given, checked.
type setRequest struct {
	id         string
	daily, bid moneyFlag
	tz, curve  string
	shards     int
	carry      bool
	given      map[string]bool // the flags on the command line
}

func (a *app) campaignSet(ctx context.Context, args []string) error {
	req, err := a.parseSet(args)
	if err != nil {
		return err
	}
	l, err := a.getLedger()
	if err != nil {
		return err
	}
	old, stored, created, err := storeSet(ctx, l, req)
	if err != nil {
		return err
	}
	res := setResult{Campaign: stored, Created: created}
	// Today's open day, if any, was opened under the time zone in force
	// before this change.
	var adjustErr error
	if req.daily.set {
		zoneOf := stored
		if !created {
			zoneOf = old
		}
		res.Today = &todayChange{Day: a.today(zoneOf), Requested: req.daily.micros}
		adjustErr = a.adjustToday(ctx, l, req.id, res.Today)
	}
	kind, changed := setEvent(req, old, res)
	if a.json {
		if err := a.printJSON(res); err != nil {
			return err
		}
	} else {
		a.printSet(res, old, adjustErr)
	}
	return a.finishSet(kind, stored, changed, req.id, adjustErr)
}

// parseSet reads and checks campaign set's command line.
func (a *app) parseSet(args []string) (setRequest, error) {
	req := setRequest{given: map[string]bool{}}
	flags := newFlagSet("campaign set")
	flags.Var(&req.daily, "daily", "daily budget, MONEY (integer micros, or currency units with the suffix units: 1.5units)")
	flags.StringVar(&req.tz, "tz", "", "IANA time zone of the campaign's day, such as Europe/Paris (new campaigns: UTC)")
	flags.StringVar(&req.curve, "curve", "", "pacing curve name, from --curves or the built-in flat (new campaigns: flat)")
	flags.IntVar(&req.shards, "shards", 0, fmt.Sprintf("shards per campaign-day, 1 to %d (new campaigns: %d)", lease.MaxShards, lease.DefaultShards))
	flags.BoolVar(&req.carry, "carry-over", false, "carry a closed day's unspent budget over to the next day (new campaigns: false)")
	flags.Var(&req.bid, "bid", "typical largest bid, MONEY: a budget of few bids gets fewer shards from the next day opened (daemons keep it current)")
	pos, err := a.parseArgs(flags, args, "<id> [--daily MONEY] [--tz Area/City] [--curve NAME] [--shards N] [--carry-over] [--bid MONEY]")
	if err != nil {
		return req, err
	}
	if req.id, err = campaignArg("campaign set", pos); err != nil {
		return req, err
	}
	flags.Visit(func(f *flag.Flag) { req.given[f.Name] = true })
	if req.daily.set && req.daily.micros > lease.MaxBudgetMicros {
		return req, usagef("campaign set: --daily %s: at most %d micros (%s)", formatUnits(req.daily.micros), lease.MaxBudgetMicros, formatUnits(lease.MaxBudgetMicros))
	}
	if req.given["tz"] {
		// "Local" would mean a different day on every host.
		if _, err := time.LoadLocation(req.tz); err != nil || req.tz == "" || req.tz == "Local" {
			return req, usagef("campaign set: unknown time zone %q: want an IANA zone such as Europe/Paris or UTC", req.tz)
		}
	}
	if req.bid.set && (req.bid.micros <= 0 || req.bid.micros > lease.MaxBudgetMicros) {
		return req, usagef("campaign set: --bid %s: want 1 to %d micros", formatUnits(req.bid.micros), lease.MaxBudgetMicros)
	}
	if req.given["shards"] && (req.shards < 1 || req.shards > lease.MaxShards) {
		return req, usagef("campaign set: --shards %d: want 1 to %d", req.shards, lease.MaxShards)
	}
	if req.given["curve"] {
		if err := a.checkCurveName(req.curve); err != nil {
			return req, err
		}
	}
	return req, nil
}

// storeSet applies the request to the campaign as stored (or to a new
// one), stores it if anything changed, records the bid, and returns the
// campaign before and after.
func storeSet(ctx context.Context, l *lease.Ledger, req setRequest) (old, stored lease.Campaign, created bool, err error) {
	old, err = l.GetCampaign(ctx, req.id)
	var unknown *lease.UnknownCampaignError
	created = errors.As(err, &unknown)
	if err != nil && !created {
		return old, old, false, err
	}
	c := old
	if created {
		if !req.daily.set {
			return old, old, created, usagef("campaign set: campaign %q is new: --daily is required", req.id)
		}
		// A new campaign that can never spend is a typo. An existing
		// one may be cut to 0 (today's unspent budget taken back).
		if req.daily.micros == 0 {
			return old, old, created, usagef("campaign set: campaign %q is new: --daily 0 would never spend; give a positive budget (1500000 micros or 1.5units)", req.id)
		}
		c = lease.Campaign{ID: req.id, TZ: "UTC", Curve: config.FlatCurve, Shards: lease.DefaultShards, State: lease.StateActive}
	}
	if req.daily.set {
		c.DailyMicros = req.daily.micros
	}
	if req.given["tz"] {
		c.TZ = req.tz
	}
	if req.given["curve"] {
		c.Curve = req.curve
	}
	if req.given["shards"] {
		c.Shards = req.shards
	}
	if req.given["carry-over"] {
		c.CarryOver = req.carry
	}
	stored = old
	if created || c != old {
		if stored, err = l.PutCampaign(ctx, c); err != nil {
			return old, old, created, err
		}
	}
	if req.bid.set {
		if err := l.SetBid(ctx, req.id, req.bid.micros); err != nil {
			return old, stored, created, err
		}
	}
	return old, stored, created, nil
}

// setEvent is the broadcast campaign set sends, and whether anything
// changed. A lower daily budget, or a cut of today's, revokes: daemons drop
// their tokens and release their leases, then lease again under the new
// budget.
func setEvent(req setRequest, old lease.Campaign, res setResult) (kind string, changed bool) {
	cut := !res.Created && req.daily.set && req.daily.micros < old.DailyMicros
	changed = res.Created || res.Campaign != old
	if t := res.Today; t != nil && t.Open {
		cut = cut || t.BudgetAfter < t.BudgetBefore
		changed = changed || t.BudgetAfter != t.BudgetBefore
	}
	if cut {
		return pacer.EventRevoked, changed
	}
	return pacer.EventChanged, changed
}

// printSet says what campaign set did, for a person.
func (a *app) printSet(res setResult, old lease.Campaign, adjustErr error) {
	stored := res.Campaign
	verb := "updated"
	switch {
	case res.Created:
		verb = "created"
	case stored == old:
		verb = "unchanged"
	}
	fmt.Fprintf(a.stdout, "campaign %s %s (version %d): daily %d micros (%s), tz %s, curve %s, %d shards, %s\n",
		stored.ID, verb, stored.Version, stored.DailyMicros, formatUnits(stored.DailyMicros), stored.TZ, stored.Curve, stored.Shards, stored.State)
	if !res.Created && (stored.TZ != old.TZ || stored.Shards != old.Shards) {
		fmt.Fprintln(a.stdout, "note: the new time zone or shard count applies from the next day opened; days already open keep theirs")
	}
	t := res.Today
	switch {
	case t == nil:
	case !t.Open:
		fmt.Fprintf(a.stdout, "today %s is not open yet: it will open with the new budget\n", t.Day)
	case adjustErr != nil:
		// reported by finishSet
	case t.BudgetBefore == t.BudgetAfter && t.BudgetAfter == t.Requested:
		fmt.Fprintf(a.stdout, "today %s is open: its budget is already %d micros\n", t.Day, t.BudgetAfter)
	case t.BudgetAfter == t.Requested:
		fmt.Fprintf(a.stdout, "today %s is open: budget %d -> %d micros (%+d)\n", t.Day, t.BudgetBefore, t.BudgetAfter, t.BudgetAfter-t.BudgetBefore)
		if t.CarriedIn > 0 {
			fmt.Fprintf(a.stdout, "(the daily budget plus the %d micros yesterday carried over)\n", t.CarriedIn)
		}
		if t.CutPending > 0 {
			fmt.Fprintf(a.stdout, "%d micros of the cut were already leased: they are taken back as those leases return (cut_pending in campaign get)\n", t.CutPending)
		}
	}
}

// finishSet announces what campaign set did and returns its error: the
// adjustment's if any (the broadcast's is then only a warning), else the
// broadcast's.
func (a *app) finishSet(kind string, c lease.Campaign, changed bool, id string, adjustErr error) error {
	bErr := a.announce(kind, c, changed)
	if adjustErr != nil {
		if bErr != nil {
			a.warnf("%v", bErr)
		}
		return fmt.Errorf("campaign %s stored, but today's budget was not adjusted (run the command again to retry): %w", id, adjustErr)
	}
	return bErr
}

// adjustToday moves an open day's budget to t.Requested. It compares with
// the day's budget rather than the campaign's old daily, so running the same
// command again after a failure retries the adjustment.
func (a *app) adjustToday(ctx context.Context, l *lease.Ledger, id string, t *todayChange) error {
	// A day planned but not opened yet is opened first: its plan holds the
	// budget from before this change.
	n, err := l.PlannedDayShards(ctx, id, t.Day, a.now())
	if err != nil || n == 0 {
		return err
	}
	t.Open = true
	before, err := l.DayBudget(ctx, id, t.Day)
	if err != nil {
		return err
	}
	// What yesterday carried over stays on top of the new daily budget.
	if d, err := time.Parse("2006-01-02", t.Day); err == nil {
		carried, err := l.CarriedOver(ctx, id, d.AddDate(0, 0, -1).Format("2006-01-02"))
		if err != nil {
			return err
		}
		t.CarriedIn = carried
		t.Requested += carried
	}
	t.BudgetBefore, t.BudgetAfter = before, before
	if before != t.Requested {
		if t.BudgetAfter, err = l.AdjustDay(ctx, id, t.Day, t.Requested, a.now()); err != nil {
			return err
		}
	}
	tot, err := l.DayTotals(ctx, id, t.Day)
	t.CutPending = tot.Owed
	return err
}

// checkCurveName refuses a curve the --curves directory does not define. If
// the directory cannot be loaded, pacerctl may be running on a host without
// it: it warns and lets the name through.
func (a *app) checkCurveName(name string) error {
	if name == config.FlatCurve || name == daemon.AutoCurve {
		return nil // built in; "auto" is refitted every day from recorded demand
	}
	if !bucket.ValidCurveName(name) {
		return usagef("campaign set: curve name %q: want 1 to 64 characters from [a-z0-9_-]", name)
	}
	curves, unreadable, err := a.loadCurves()
	if unreadable != nil {
		a.warnf("cannot check that curve %q exists: %v\n  pass --curves DIR (or set PACER_CURVES; configs/curves in a source checkout). "+
			"Daemons without curve %q pace the campaign flat and say so in their log only.", name, unreadable, name)
		return nil
	}
	if err != nil {
		a.warnf("cannot check that curve %q exists: %v", name, err)
		return nil
	}
	if _, ok := curves[name]; !ok {
		names := make([]string, 0, len(curves))
		for n := range curves {
			names = append(names, n)
		}
		slices.Sort(names)
		return usagef("campaign set: unknown curve %q: %s has %s", name, a.curvesDir, strings.Join(names, ", "))
	}
	return nil
}

func (a *app) campaignGet(ctx context.Context, args []string) error {
	pos, err := a.parseArgs(newFlagSet("campaign get"), args, "<id>")
	if err != nil {
		return err
	}
	l, c, err := a.loadCampaign(ctx, "campaign get", pos)
	if err != nil {
		return err
	}
	v, err := a.view(ctx, l, c)
	if err != nil {
		return err
	}
	return a.printJSON(v)
}

func (a *app) campaignList(ctx context.Context, args []string) error {
	if err := a.noArgs("campaign list", args); err != nil {
		return err
	}
	l, cs, err := a.campaigns(ctx)
	if err != nil {
		return err
	}
	views := make([]campaignView, 0, len(cs))
	for _, c := range cs {
		v, err := a.view(ctx, l, c)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	if a.json {
		return a.printJSON(views)
	}
	tw := a.table()
	fmt.Fprintln(tw, "ID\tDAILY\tTZ\tCURVE\tSHARDS\tSTATE\tSPENT TODAY")
	for _, v := range views {
		spent := "-" // day not open
		if v.DayOpen && v.Budget > 0 {
			// Budget <= 1e15, so spent*1000 cannot overflow.
			p := v.Spent * 1000 / v.Budget
			spent = fmt.Sprintf("%d.%d%%", p/10, p%10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.ID, formatUnits(v.DailyMicros), v.TZ, v.Curve, v.Shards, v.State, spent)
	}
	return tw.Flush()
}

func (a *app) campaignState(ctx context.Context, verb, state string, args []string) error {
	name := "campaign " + verb
	pos, err := a.parseArgs(newFlagSet(name), args, "<id>")
	if err != nil {
		return err
	}
	l, c, err := a.loadCampaign(ctx, name, pos)
	if err != nil {
		return err
	}
	id := c.ID
	changed := c.State != state
	if changed {
		if c, err = l.SetState(ctx, id, state); err != nil {
			return err
		}
	}
	kind := pacer.EventChanged
	if state == lease.StatePaused {
		kind = pacer.EventRevoked
	}
	if a.json {
		if err := a.printJSON(c); err != nil {
			return err
		}
		return a.announce(kind, c, changed)
	}
	if !changed {
		fmt.Fprintf(a.stdout, "campaign %s is already %s (version %d)\n", id, state, c.Version)
	} else {
		fmt.Fprintf(a.stdout, "campaign %s %s (version %d); daemons apply it at their next campaign refresh\n", id, state, c.Version)
	}
	return a.announce(kind, c, changed)
}

// loadCampaign reads the one campaign id of a command's arguments and loads
// it from the ledger.
func (a *app) loadCampaign(ctx context.Context, cmd string, pos []string) (*lease.Ledger, lease.Campaign, error) {
	id, err := campaignArg(cmd, pos)
	if err != nil {
		return nil, lease.Campaign{}, err
	}
	l, err := a.getLedger()
	if err != nil {
		return nil, lease.Campaign{}, err
	}
	c, err := l.GetCampaign(ctx, id)
	return l, c, err
}
