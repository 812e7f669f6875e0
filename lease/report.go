package lease

import (
	"context"
	"fmt"
	"strconv"
)

// Report is a campaign-day's account, rebuilt from its shards' audit streams
// (not from their balances, so it also checks them). Micros.
type Report struct {
	Campaign string `json:"campaign"`
	Day      string `json:"day"`
	// Budget is the day's budget: opened, plus or minus adjustments.
	Budget int64 `json:"budget"`
	// Spent is everything counted as spent: reported by daemons on release,
	// plus Lost.
	Spent int64 `json:"spent"`
	// Returned is unused micros daemons gave back on release (including what
	// bidders refunded to them): budget that went back into the pool.
	Returned int64 `json:"returned"`
	// Lost is what expired leases were settled at because their holder never
	// reported (crashed or cut off): an upper bound on what they spent.
	Lost int64 `json:"lost"`
	// Outstanding is still leased when the report was built.
	Outstanding int64 `json:"outstanding"`
	// UnderDelivery is Budget - Spent.
	UnderDelivery int64 `json:"under_delivery"`
	Leases        int64 `json:"leases"`
	Settled       int64 `json:"settled_leases"`
	Events        int64 `json:"events"`
}

// BuildReport replays the campaign-day's audit streams.
func (l *Ledger) BuildReport(ctx context.Context, campaign, day string) (Report, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return Report{}, err
	}
	if n == 0 {
		return Report{}, fmt.Errorf("ledger %s/%s: %w", campaign, day, ErrDayNotOpen)
	}
	r := Report{Campaign: campaign, Day: day}
	var granted int64
	for i := range n {
		k := ShardKey{campaign, day, i}
		start := "-"
		for {
			msgs, err := l.rdb.XRangeN(ctx, k.AuditKey(), start, "+", 1000).Result()
			if err != nil {
				return Report{}, fmt.Errorf("ledger %s: audit: %w", k, err)
			}
			for _, m := range msgs {
				r.Events++
				v := func(f string) int64 {
					s, _ := m.Values[f].(string)
					n, _ := strconv.ParseInt(s, 10, 64)
					return n
				}
				switch m.Values["ev"] {
				case "open", "adjust":
					r.Budget += v("amount")
				case "grant":
					r.Leases++
					granted += v("amount")
				case "release":
					r.Spent += v("amount") - v("unused")
					r.Returned += v("unused")
					granted -= v("amount")
				case "settle":
					r.Settled++
					r.Lost += v("amount")
					r.Spent += v("amount")
					granted -= v("amount")
				}
			}
			if len(msgs) < 1000 {
				break
			}
			start = "(" + msgs[len(msgs)-1].ID
		}
	}
	r.Outstanding = granted
	r.UnderDelivery = r.Budget - r.Spent
	return r, nil
}
