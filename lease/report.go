package lease

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Report is a campaign-day's account, from counters every ledger script keeps
// on its shard as it writes the shard's audit stream (so exact however long
// the stream grew), or, for a shard opened before the counters existed,
// replayed from its stream. Micros.
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
	// CarriedOver is what the day passed on to the next one (campaigns with
	// carry-over): Budget already excludes it.
	CarriedOver int64 `json:"carried_over"`
	Leases      int64 `json:"leases"`
	Settled     int64 `json:"settled_leases"`
	Events      int64 `json:"events"`
}

// reportFields are the report counters on a shard's state hash (prelude.lua's
// audit), in the order BuildReport reads them, then rp: the lease calls'
// packed counters (prelude.lua's packed), each added to its r_* field.
var reportFields = []string{"r_events", "r_budget", "r_leases", "r_granted", "r_spent", "r_returned", "r_closed", "r_settled", "r_lost", "rp"}

// packedAt is, for each of rp's six counters in order, its index in
// parseReportFields' result (reportFields' order): events, leases,
// granted, spent, returned, closed.
var packedAt = [6]int{0, 2, 3, 4, 5, 6}

// rpLen is rp's length: six big-endian doubles.
const rpLen = 6 * 8

// parsePacked reads rp (struct.pack('>dddddd')): six counts, each an integer
// below 2^53 (prelude.lua writes no other).
func parsePacked(k ShardKey, rp string) ([6]int64, error) {
	var c [6]int64
	if len(rp) != rpLen {
		return c, fmt.Errorf("ledger %s: packed counters rp are %d bytes, want %d", k, len(rp), rpLen)
	}
	for i := range c {
		f := math.Float64frombits(binary.BigEndian.Uint64([]byte(rp[8*i : 8*i+8])))
		if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return c, fmt.Errorf("ledger %s: packed counter %d is %v", k, i, f)
		}
		c[i] = int64(f)
	}
	return c, nil
}

// BuildReport sums the campaign-day's shards' report counters: one pipeline
// of one HMGET per shard, whatever the day's traffic. The audit streams are
// the trail behind it (capped at Config.AuditMaxLen entries per shard, kept
// as long as the day's keys: Config.Retention); a shard without counters
// (opened by an older version) is replayed from its stream.
func (l *Ledger) BuildReport(ctx context.Context, campaign, day string) (Report, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return Report{}, err
	}
	if n == 0 {
		return Report{}, fmt.Errorf("ledger %s/%s: %w", campaign, day, ErrDayNotOpen)
	}
	p := l.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, n)
	for i := range n {
		cmds[i] = p.HMGet(ctx, ShardKey{campaign, day, i}.keys()[0], reportFields...)
	}
	if _, err := p.Exec(ctx); err != nil {
		return Report{}, fmt.Errorf("ledger %s/%s: report counters: %w", campaign, day, err)
	}
	r := Report{Campaign: campaign, Day: day}
	var granted int64
	for i, c := range cmds {
		v := c.Val()
		if len(v) != len(reportFields) || v[0] == nil {
			if err := l.replayShard(ctx, ShardKey{campaign, day, i}, &r, &granted); err != nil {
				return Report{}, err
			}
			continue
		}
		f, err := parseReportFields(ShardKey{campaign, day, i}, v)
		if err != nil {
			return Report{}, err
		}
		r.Events += f[0]
		r.Budget += f[1]
		r.Leases += f[2]
		granted += f[3] - f[6]
		r.Spent += f[4]
		r.Returned += f[5]
		r.Settled += f[7]
		r.Lost += f[8]
	}
	r.Outstanding = granted
	r.UnderDelivery = r.Budget - r.Spent
	if r.CarriedOver, err = l.CarriedOver(ctx, campaign, day); err != nil {
		return Report{}, err
	}
	return r, nil
}

// parseReportFields reads a shard's report counters, as HMGET of
// reportFields returned them (a counter not there yet is 0): each r_*
// field plus its part of rp.
func parseReportFields(k ShardKey, v []any) ([9]int64, error) {
	var f [9]int64
	for j := range f {
		s, _ := v[j].(string)
		if s == "" {
			continue
		}
		var err error
		if f[j], err = strconv.ParseInt(s, 10, 64); err != nil {
			return f, fmt.Errorf("ledger %s: report counter %s is %q", k, reportFields[j], s)
		}
	}
	if rp, _ := v[len(f)].(string); rp != "" {
		c, err := parsePacked(k, rp)
		if err != nil {
			return f, err
		}
		for i, j := range packedAt {
			f[j] += c[i]
		}
	}
	return f, nil
}

// ReplayReport rebuilds a campaign-day's report from its audit streams
// alone, as BuildReport did before the counters: a cross-check of the
// counters while the streams are complete (not trimmed at AuditMaxLen).
func (l *Ledger) ReplayReport(ctx context.Context, campaign, day string) (Report, error) {
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
		if err := l.replayShard(ctx, ShardKey{campaign, day, i}, &r, &granted); err != nil {
			return Report{}, err
		}
	}
	r.Outstanding = granted
	r.UnderDelivery = r.Budget - r.Spent
	if r.CarriedOver, err = l.CarriedOver(ctx, campaign, day); err != nil {
		return Report{}, err
	}
	return r, nil
}

// replayShard adds one shard's audit stream to r; granted tracks what is
// still leased.
func (l *Ledger) replayShard(ctx context.Context, k ShardKey, r *Report, granted *int64) error {
	start := "-"
	for {
		msgs, err := l.rdb.XRangeN(ctx, k.AuditKey(), start, "+", 1000).Result()
		if err != nil {
			return fmt.Errorf("ledger %s: audit: %w", k, err)
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
				*granted += v("amount")
			case "release":
				r.Spent += v("amount") - v("unused")
				r.Returned += v("unused")
				*granted -= v("amount")
			case "settle":
				r.Settled++
				r.Lost += v("amount")
				r.Spent += v("amount")
				*granted -= v("amount")
			}
		}
		if len(msgs) < 1000 {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

func reportKey(campaign, day string) string { return keyPrefix + "report:" + campaign + ":" + day }

// ReportRetention is how long a closed day's report is kept: over a year, for
// year-on-year comparisons.
const ReportRetention = 400 * 24 * time.Hour

// SaveReport stores a closed day's report (once: a second save keeps the first).
func (l *Ledger) SaveReport(ctx context.Context, r Report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := l.rdb.SetNX(ctx, reportKey(r.Campaign, r.Day), data, ReportRetention).Err(); err != nil {
		return fmt.Errorf("ledger %s/%s: save report: %w", r.Campaign, r.Day, err)
	}
	return nil
}

// HasReport reports whether a day's report was saved.
func (l *Ledger) HasReport(ctx context.Context, campaign, day string) (bool, error) {
	n, err := l.rdb.Exists(ctx, reportKey(campaign, day)).Result()
	if err != nil {
		return false, fmt.Errorf("ledger %s/%s: report: %w", campaign, day, err)
	}
	return n == 1, nil
}

// LoadReport returns a saved report; ok is false if the day has none yet.
func (l *Ledger) LoadReport(ctx context.Context, campaign, day string) (r Report, ok bool, err error) {
	data, err := l.rdb.Get(ctx, reportKey(campaign, day)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Report{}, false, nil
	}
	if err != nil {
		return Report{}, false, fmt.Errorf("ledger %s/%s: report: %w", campaign, day, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, false, fmt.Errorf("ledger %s/%s: report: %w", campaign, day, err)
	}
	return r, true, nil
}
