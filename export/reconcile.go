package export

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/lease"
)

// Difference is one campaign-day whose SQL totals differ from the ledger's
// report counters, field by field.
type Difference struct {
	Campaign string              `json:"campaign"`
	Day      string              `json:"day"`
	Fields   map[string][2]int64 `json:"fields"` // field -> {sql, ledger}
	// Reason is set instead of Fields when one side has no such day.
	Reason string `json:"reason,omitempty"`
}

func (d Difference) String() string {
	if d.Reason != "" {
		return fmt.Sprintf("%s/%s: %s", d.Campaign, d.Day, d.Reason)
	}
	s := fmt.Sprintf("%s/%s:", d.Campaign, d.Day)
	for _, f := range totalsFieldNames {
		if v, ok := d.Fields[f]; ok {
			s += fmt.Sprintf(" %s sql=%d ledger=%d (%+d)", f, v[0], v[1], v[0]-v[1])
		}
	}
	return s
}

var totalsFieldNames = []string{"budget", "spent", "returned", "lost", "leases", "settled", "events"}

// DayTotals reads a campaign-day's SQL totals; ok is false if it has none.
func DayTotals(ctx context.Context, db *pgxpool.Pool, campaign, day string) (t Totals, ok bool, err error) {
	err = db.QueryRow(ctx, `SELECT `+totalsColumns+` FROM spend_days WHERE campaign = $1 AND day = $2::text::date`, campaign, day).
		Scan(&t.Budget, &t.Spent, &t.Returned, &t.Lost, &t.Carry, &t.Cuts, &t.Granted, &t.Closed, &t.Leases, &t.Settled, &t.Events, &t.Refunded)
	if errors.Is(err, pgx.ErrNoRows) {
		return Totals{}, false, nil
	}
	if err != nil {
		return Totals{}, false, fmt.Errorf("export: %s/%s totals: %w", campaign, day, err)
	}
	return t, true, nil
}

// Compare compares one campaign-day's SQL totals with the ledger's report
// counters (lease.BuildReport): budget, spent, returned, lost, leases,
// settled and events. It returns nil when they agree.
func Compare(t Totals, r lease.Report) *Difference {
	d := &Difference{Campaign: r.Campaign, Day: r.Day, Fields: map[string][2]int64{}}
	for _, f := range []struct {
		name        string
		sql, ledger int64
	}{
		{"budget", t.Budget, r.Budget}, {"spent", t.Spent, r.Spent}, {"returned", t.Returned, r.Returned},
		{"lost", t.Lost, r.Lost}, {"leases", t.Leases, r.Leases}, {"settled", t.Settled, r.Settled},
		{"events", t.Events, r.Events},
	} {
		if f.sql != f.ledger {
			d.Fields[f.name] = [2]int64{f.sql, f.ledger}
		}
	}
	if len(d.Fields) == 0 {
		return nil
	}
	return d
}

// Reconcile compares every campaign-day the ledger still holds (all of them,
// or those of day when day is not "") with PostgreSQL, and returns the
// differences and how many days it compared.
func Reconcile(ctx context.Context, db *pgxpool.Pool, l *lease.Ledger, day string) (diffs []Difference, days int, err error) {
	ids, err := l.CampaignIDs(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, id := range ids {
		open, err := l.OpenDays(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		for _, d := range open {
			if day != "" && d != day {
				continue
			}
			r, err := l.BuildReport(ctx, id, d)
			if err != nil {
				return nil, days, err
			}
			days++
			t, ok, err := DayTotals(ctx, db, id, d)
			if err != nil {
				return nil, days, err
			}
			if !ok {
				diffs = append(diffs, Difference{Campaign: id, Day: d, Reason: fmt.Sprintf("not in SQL (the ledger has %d events, spent %d)", r.Events, r.Spent)})
				continue
			}
			if diff := Compare(t, r); diff != nil {
				diffs = append(diffs, *diff)
			}
		}
	}
	return diffs, days, nil
}
