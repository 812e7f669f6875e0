package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

// reportView is report's JSON: the ledger's report, and whether it is the
// one saved when the day closed or one rebuilt now.
type reportView struct {
	lease.Report
	// Provisional is true when no report was saved for the day (it is still
	// open, or the reconciler has not closed it yet): the figures were
	// rebuilt from the audit streams now and can still change.
	Provisional bool `json:"provisional"`
}

// yesterday returns the local day before the one containing now.
func yesterday(now time.Time, loc *time.Location) bucket.Day {
	today := bucket.DayOf(now, loc)
	// Local days are 23 to 25 hours long: an hour before midnight is always
	// in the previous one.
	return bucket.DayOf(today.Start.Add(-time.Hour), loc)
}

func (a *app) report(ctx context.Context, args []string) error {
	flags := newFlagSet("report")
	dayFlag := flags.String("day", "", "local date of the campaign-day, YYYY-MM-DD (default: yesterday in the campaign's time zone)")
	pos, err := a.parseArgs(flags, args, "<id> [--day YYYY-MM-DD]")
	if err != nil {
		return err
	}
	l, c, err := a.loadCampaign(ctx, "report", pos)
	if err != nil {
		return err
	}
	id := c.ID
	day := yesterday(a.now(), c.Location()).Key
	if *dayFlag != "" {
		d, err := bucket.ParseDayKey(*dayFlag, c.Location())
		if err != nil {
			return usagef("report: --day %q: want a date YYYY-MM-DD", *dayFlag)
		}
		day = d.Key
	}

	v := reportView{}
	r, saved, err := l.LoadReport(ctx, id, day)
	if err != nil {
		return err
	}
	if saved {
		v.Report = r
	} else {
		if v.Report, err = l.BuildReport(ctx, id, day); err != nil {
			if errors.Is(err, lease.ErrDayNotOpen) {
				hint := ""
				if *dayFlag == "" {
					today := bucket.DayOf(a.now(), c.Location()).Key
					hint = fmt.Sprintf(" (--day defaults to yesterday; for today's provisional account run `pacerctl report %s --day %s`)", id, today)
				}
				return fmt.Errorf("campaign %s has no day %s in the ledger: it was never opened, or is older than the ledger keeps%s", id, day, hint)
			}
			return err
		}
		v.Provisional = true
	}
	if a.json {
		return a.printJSON(v)
	}

	if v.Provisional {
		fmt.Fprintf(a.stdout, "report %s %s (%s): PROVISIONAL, the day is not closed: rebuilt from the audit streams now,\n"+
			"its figures can still change\n\n", id, day, c.TZ)
	} else {
		fmt.Fprintf(a.stdout, "report %s %s (%s): final, saved when the day was closed\n\n", id, day, c.TZ)
	}
	share := func(micros int64) string {
		if v.Budget <= 0 {
			return ""
		}
		return percentOf(micros, v.Budget)
	}
	tw := a.table()
	fmt.Fprintln(tw, "\tMICROS\tUNITS\tOF BUDGET\tWHAT")
	for _, row := range []struct {
		name   string
		micros int64
		note   string
	}{
		{"budget", v.Budget, "opened, plus or minus adjustments"},
		{"spent", v.Spent, "reported by daemons, plus lost"},
		{"returned", v.Returned, "unused lease budget given back"},
		{"lost", v.Lost, "settled leases of daemons that never reported"},
		{"outstanding", v.Outstanding, "still leased"},
		{"under_delivery", v.UnderDelivery, "budget - spent"},
	} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", row.name, row.micros, formatUnits(row.micros), share(row.micros), row.note)
	}
	fmt.Fprintf(tw, "leases\t%d\t\t\tgranted\n", v.Leases)
	fmt.Fprintf(tw, "settled_leases\t%d\t\t\texpired unreported and settled as spent\n", v.Settled)
	return tw.Flush()
}

// percentOf formats part/whole as a percentage with one decimal, rounded
// down (whole > 0). Amounts are at most 1e15, so part*1000 cannot overflow.
func percentOf(part, whole int64) string {
	p := part * 1000 / whole
	sign := ""
	if p < 0 {
		sign, p = "-", -p
	}
	return fmt.Sprintf("%s%d.%d%%", sign, p/10, p%10)
}
