package main

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// statusView is status's JSON.
type statusView struct {
	At string `json:"at"`
	// Reconciler is nil without --etcd.
	Reconciler *reconcilerView  `json:"reconciler"`
	Daemons    []holderView     `json:"daemons"`
	Campaigns  []campaignStatus `json:"campaigns"`
}

type reconcilerView struct {
	Leader  string   `json:"leader"` // "" when no daemon campaigns
	Standby []string `json:"standby"`
	Error   string   `json:"error,omitempty"`
}

// holderView is one daemon as its outstanding leases show it.
type holderView struct {
	Holder    string `json:"holder"`
	Leases    int    `json:"leases"`
	Micros    int64  `json:"micros"`
	Expired   int    `json:"expired"` // past their expiry: the holder may be gone
	Campaigns int    `json:"campaigns"`
}

// campaignStatus is one campaign's today.
type campaignStatus struct {
	ID        string `json:"id"`
	TZ        string `json:"tz"`
	Curve     string `json:"curve"`
	Day       string `json:"day"`
	DayOpen   bool   `json:"day_open"`
	State     string `json:"state"` // active, paused or exhausted
	Budget    int64  `json:"budget"`
	Spent     int64  `json:"spent"`
	Leased    int64  `json:"leased"`
	Remaining int64  `json:"remaining"` // locked + available: what can still be granted
	// SpentPPB is spent / budget, TargetPPB the curve's cumulative share at
	// now, both in parts per billion; TargetPPB is null when the campaign's
	// curve is not in --curves.
	SpentPPB  int64  `json:"spent_share_ppb"`
	TargetPPB *int64 `json:"target_share_ppb"`
}

func (a *app) status(ctx context.Context, args []string) error {
	if err := a.noArgs("status", args); err != nil {
		return err
	}
	now := a.now()
	v := statusView{At: now.UTC().Format(time.RFC3339), Daemons: []holderView{}, Campaigns: []campaignStatus{}}
	failed := false
	if a.etcdURLs != "" {
		r, err := a.reconciler(ctx)
		if err != nil {
			r.Error = err.Error()
			a.warnf("etcd %s: %v", a.etcdURLs, err)
			failed = true
		}
		v.Reconciler = &r
	}

	l, cs, err := a.campaigns(ctx)
	if err != nil {
		return err
	}
	curves, unreadable, err := a.loadCurves()
	switch {
	case unreadable != nil:
		a.warnf("cannot read the curves directory (%v): targets only for campaigns on %s.\n  Pass --curves DIR (or set PACER_CURVES; configs/curves in a source checkout)", unreadable, config.FlatCurve)
		curves = map[string]*bucket.Curve{config.FlatCurve: bucket.Flat(24)}
	case err != nil:
		return err
	}

	holders := map[string]*holderView{}
	holderCampaigns := map[string]map[string]bool{}
	for _, c := range cs {
		s, err := a.campaignStatus(ctx, l, c, curves[c.Curve], now)
		if err != nil {
			return err
		}
		v.Campaigns = append(v.Campaigns, s)
		if err := scanLeases(ctx, l, c.ID, now, func(holder string, micros int64, expired bool) {
			h := holders[holder]
			if h == nil {
				h = &holderView{Holder: holder}
				holders[holder] = h
				holderCampaigns[holder] = map[string]bool{}
			}
			h.Leases++
			h.Micros += micros
			if expired {
				h.Expired++
			}
			holderCampaigns[holder][c.ID] = true
		}); err != nil {
			return err
		}
	}
	for name, h := range holders {
		h.Campaigns = len(holderCampaigns[name])
		v.Daemons = append(v.Daemons, *h)
	}
	slices.SortFunc(v.Daemons, func(x, y holderView) int { return strings.Compare(x.Holder, y.Holder) })

	if a.json {
		if err := a.printJSON(v); err != nil {
			return err
		}
	} else if err := a.printStatus(v); err != nil {
		return err
	}
	if failed {
		return errReported
	}
	return nil
}

// reconciler reads the election from etcd (reconcile.Candidates): the
// leader and the standbys.
func (a *app) reconciler(ctx context.Context) (reconcilerView, error) {
	r := reconcilerView{Standby: []string{}}
	cli, err := a.etcdClient()
	if err != nil {
		return r, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	names, err := reconcile.Candidates(ctx, cli)
	if err != nil {
		return r, err
	}
	if len(names) > 0 {
		r.Leader = names[0]
		r.Standby = append(r.Standby, names[1:]...)
	}
	return r, nil
}

func (a *app) campaignStatus(ctx context.Context, l *lease.Ledger, c lease.Campaign, curve *bucket.Curve, now time.Time) (campaignStatus, error) {
	day := bucket.DayOf(now, c.Location())
	s := campaignStatus{ID: c.ID, TZ: c.TZ, Curve: c.Curve, Day: day.Key, State: c.State}
	if curve != nil {
		t := curve.AtTime(now, day)
		s.TargetPPB = &t
	}
	t, open, err := l.OpenDayTotals(ctx, c.ID, day.Key)
	if err != nil || !open {
		return s, err
	}
	s.DayOpen = true
	s.Budget, s.Spent, s.Leased, s.Remaining = t.Budget, t.Spent, t.Leased, t.Remaining()
	if t.Budget > 0 {
		s.SpentPPB = ppbOf(t.Spent, t.Budget)
	}
	if c.State == lease.StateActive && s.Remaining == 0 {
		s.State = "exhausted"
	}
	return s, nil
}

// ppbOf returns part/whole in parts per billion, rounded down, for
// 0 <= part and 0 < whole. The product is taken in 128 bits: amounts reach
// 1e15 micros and PPB is 1e9.
func ppbOf(part, whole int64) int64 {
	if part < 0 || whole <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(part), uint64(bucket.PPB))
	if hi >= uint64(whole) {
		return math.MaxInt64 // not reachable for part <= whole
	}
	q, _ := bits.Div64(hi, lo, uint64(whole))
	return int64(min(q, math.MaxInt64))
}

// scanLeases calls fn for every outstanding lease of every open day of a
// campaign.
func scanLeases(ctx context.Context, l *lease.Ledger, id string, now time.Time, fn func(holder string, micros int64, expired bool)) error {
	days, err := l.OpenDays(ctx, id)
	if err != nil {
		return err
	}
	for _, day := range days {
		recs, err := l.DayLeases(ctx, id, day)
		if err != nil {
			return err
		}
		for _, r := range recs {
			fn(r.Holder, r.Amount, r.Expiry.UnixMilli() < now.UnixMilli())
		}
	}
	return nil
}

func (a *app) printStatus(v statusView) error {
	switch r := v.Reconciler; {
	case r == nil:
		fmt.Fprintln(a.stdout, "reconciler: unknown (pass --etcd to read the election)")
	case r.Error != "":
		fmt.Fprintf(a.stdout, "reconciler: unknown (etcd: %s)\n", r.Error)
	case r.Leader == "":
		fmt.Fprintln(a.stdout, "reconciler: no leader: no daemon is campaigning in etcd")
	default:
		standby := "none"
		if len(r.Standby) > 0 {
			standby = strings.Join(r.Standby, ", ")
		}
		fmt.Fprintf(a.stdout, "reconciler: leader %s (standby: %s)\n", r.Leader, standby)
	}
	fmt.Fprintln(a.stdout)
	tw := a.table()
	if len(v.Daemons) == 0 {
		fmt.Fprintln(a.stdout, "no daemon holds a lease")
	} else {
		fmt.Fprintln(tw, "DAEMON\tLEASES\tLEASED\tEXPIRED\tCAMPAIGNS")
		for _, h := range v.Daemons {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", h.Holder, h.Leases, formatUnits(h.Micros), h.Expired, h.Campaigns)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(a.stdout)
	if len(v.Campaigns) == 0 {
		fmt.Fprintln(a.stdout, "no campaigns")
		return nil
	}
	fmt.Fprintln(tw, "CAMPAIGN\tDAY\tSTATE\tBUDGET\tSPENT\tLEASED\tSPENT%\tTARGET%\tPACE")
	for _, c := range v.Campaigns {
		target, pace := "-", "-"
		if c.TargetPPB != nil {
			target = percent(*c.TargetPPB)
		}
		if !c.DayOpen {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t%s\tday not open\n", c.ID, c.Day, c.State, target)
			continue
		}
		if c.TargetPPB != nil {
			d := c.SpentPPB - *c.TargetPPB
			sign := "+"
			if d < 0 {
				sign, d = "-", -d
			}
			pace = sign + strings.TrimSuffix(percent(d), "%") + " pts"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Day, c.State,
			formatUnits(c.Budget), formatUnits(c.Spent), formatUnits(c.Leased), percent(c.SpentPPB), target, pace)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A fresh fleet shows SPENT 0 and a large negative PACE: say why,
	// once, rather than let it read as a fault.
	for _, c := range v.Campaigns {
		if c.DayOpen && c.Spent == 0 && c.Leased > 0 {
			fmt.Fprint(a.stdout, "\nSPENT counts what daemons have reported: spend from a lease shows as the lease renews or\n"+
				"returns. TARGET% is the curve's share of the local day so far, from midnight, so a\n"+
				"campaign created today starts behind it.\n")
			break
		}
	}
	return nil
}
