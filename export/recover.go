package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/lease"
)

// PostgreSQL's ledger_events are a second copy of the money: every grant,
// re-assertion, release and settlement the ledger acknowledged, up to the
// export's lag. From them, per shard-day and per daemon run (a lease id's
// holder-bootID prefix), the cumulative micros the shard granted the run and
// the micros the run gave back unused are known: the totals the ledger
// keeps for each run (lease.Ledger.RunTotals) and that a daemon re-asserts
// after a loss (lease.Ledger.ReassertRun). A ledger restored from an older
// copy records less for some run than PostgreSQL saw; recovery re-asserts
// PostgreSQL's totals through the same idempotent path, so that what the
// run's clients spent from the forgotten leases is counted spent, out of
// what the shard can still grant (a shortfall is owed). What the fleet can
// spend twice is then only what was granted and never exported.

// ShardCopy is what PostgreSQL recorded of one shard of a campaign-day.
type ShardCopy struct {
	// Runs are each daemon run's totals: Granted (each lease once, granted
	// or re-asserted) and Returned (the unused micros of its releases).
	Runs map[string]lease.History
	// Open are the leases granted that no release or settlement closes.
	Open []lease.LeaseRecord
}

// copyQuery groups a campaign-day's lease events by shard and lease: the
// lease's amount (every kind carries it), the unused micros its release
// gave back, whether it was closed, its holder and expiry (in ms). It finds
// the day's rows by its streams' ids (ledger_events' primary key).
const copyQuery = `SELECT shard, ref,
    max(micros),
    coalesce(max(unused) FILTER (WHERE kind = 'release'), 0),
    bool_or(kind IN ('release', 'settle')),
    coalesce(max(holder), ''),
    coalesce(max((extract(epoch FROM expiry) * 1000)::bigint) FILTER (WHERE kind IN ('grant', 'reassert')), 0)
  FROM ledger_events
  WHERE stream IN (SELECT stream FROM export_cursors WHERE campaign = $1 AND day = $2::text::date)
    AND kind IN ('grant', 'reassert', 'release', 'settle')
  GROUP BY shard, ref`

// ReadCopy reads PostgreSQL's copy of a campaign-day's leases, by shard.
// Sums that would overflow int64 are an error.
func ReadCopy(ctx context.Context, db *pgxpool.Pool, campaign, day string) (map[int]*ShardCopy, error) {
	rows, err := db.Query(ctx, copyQuery, campaign, day)
	if err != nil {
		return nil, fmt.Errorf("export: %s/%s: read ledger_events: %w", campaign, day, err)
	}
	defer rows.Close()
	out := map[int]*ShardCopy{}
	for rows.Next() {
		var shard int
		var ref, holder string
		var amount, unused, expiryMS int64
		var closed bool
		if err := rows.Scan(&shard, &ref, &amount, &unused, &closed, &holder, &expiryMS); err != nil {
			return nil, fmt.Errorf("export: %s/%s: read ledger_events: %w", campaign, day, err)
		}
		run := lease.RunOf(ref)
		if run == "" || amount <= 0 {
			continue
		}
		if unused < 0 || unused > amount {
			return nil, fmt.Errorf("export: %s/%s/%d: lease %s gave back %d of %d micros: malformed", campaign, day, shard, ref, unused, amount)
		}
		c := out[shard]
		if c == nil {
			c = &ShardCopy{Runs: map[string]lease.History{}}
			out[shard] = c
		}
		h := c.Runs[run]
		if h.Granted > math.MaxInt64-amount || h.Returned > math.MaxInt64-unused {
			return nil, fmt.Errorf("export: %s/%s/%d: run %s's totals overflow int64", campaign, day, shard, run)
		}
		h.Granted += amount
		h.Returned += unused
		c.Runs[run] = h
		if !closed {
			c.Open = append(c.Open, lease.LeaseRecord{ID: ref, Amount: amount, Holder: holder, Expiry: time.UnixMilli(expiryMS)})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("export: %s/%s: read ledger_events: %w", campaign, day, err)
	}
	return out, nil
}

// RunBehind is a daemon run the ledger records less for, on one shard, than
// PostgreSQL saw.
type RunBehind struct {
	Shard  lease.ShardKey `json:"shard"`
	Run    string         `json:"run"`
	SQL    lease.History  `json:"sql"`
	Ledger lease.History  `json:"ledger"`
	// Unseen is what PostgreSQL saw the run consume (granted less
	// returned) beyond what the ledger counts: what re-asserting
	// PostgreSQL's totals counts spent (0 when the ledger counts more).
	Unseen int64 `json:"unseen_micros"`
}

func (r RunBehind) String() string {
	return fmt.Sprintf("%s run %s: ledger granted=%d returned=%d, PostgreSQL granted=%d returned=%d: %d micros consumed that the ledger does not count",
		r.Shard, r.Run, r.Ledger.Granted, r.Ledger.Returned, r.SQL.Granted, r.SQL.Returned, r.Unseen)
}

// LeaseBehind is a lease PostgreSQL holds open, not expired, of a run the
// ledger is behind on and not among the shard's outstanding leases: the
// ledger forgot it, or it was closed after the export's last entry.
type LeaseBehind struct {
	Shard lease.ShardKey    `json:"shard"`
	Lease lease.LeaseRecord `json:"lease"`
}

// Finding is a campaign-day or shard recovery cannot raise: not open in the
// ledger, closed, or unlike PostgreSQL's copy.
type Finding struct {
	Campaign string `json:"campaign"`
	Day      string `json:"day"`
	Shard    int    `json:"shard"` // -1: the whole day
	What     string `json:"what"`
}

func (f Finding) String() string {
	if f.Shard < 0 {
		return fmt.Sprintf("%s/%s: %s", f.Campaign, f.Day, f.What)
	}
	return fmt.Sprintf("%s/%s/%d: %s", f.Campaign, f.Day, f.Shard, f.What)
}

// Plan is what comparing the ledger with PostgreSQL's copy found.
type Plan struct {
	Days     int           `json:"days"`   // campaign-days compared
	Shards   int           `json:"shards"` // shards compared
	Runs     []RunBehind   `json:"runs"`
	Leases   []LeaseBehind `json:"leases"`
	Findings []Finding     `json:"findings"`
}

// Behind reports whether the ledger is behind PostgreSQL anywhere, or a day
// could not be compared.
func (p Plan) Behind() bool { return len(p.Runs) > 0 || len(p.Findings) > 0 }

// Unseen sums the micros consumed that the ledger does not count.
func (p Plan) Unseen() int64 {
	var n int64
	for _, r := range p.Runs {
		n = satAdd(n, r.Unseen)
	}
	return n
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// CompareOptions selects what CompareCopy looks at.
type CompareOptions struct {
	Campaign string // "" for every campaign
	Day      string // "" for every day from Since on
	// Since is the first day looked at when Day is "": by default the day
	// before yesterday (UTC) of Now, which covers yesterday and today in
	// every time zone.
	Since string
	Now   time.Time
}

// CompareCopy compares, for each campaign-day PostgreSQL holds (those of
// opts), every shard's run totals in the ledger with PostgreSQL's copy.
func CompareCopy(ctx context.Context, db *pgxpool.Pool, l *lease.Ledger, opts CompareOptions) (Plan, error) {
	days, err := copyDays(ctx, db, opts)
	if err != nil {
		return Plan{}, err
	}
	var p Plan
	for _, cd := range days {
		if err := compareDay(ctx, db, l, cd[0], cd[1], opts.Now, &p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// copyDays lists the campaign-days PostgreSQL holds that opts selects.
func copyDays(ctx context.Context, db *pgxpool.Pool, opts CompareOptions) ([][2]string, error) {
	since := opts.Since
	if since == "" {
		since = opts.Now.UTC().AddDate(0, 0, -2).Format(time.DateOnly)
	}
	q := `SELECT campaign, day::text FROM spend_days WHERE ($1 = '' OR campaign = $1)
	  AND (($2 = '' AND day >= $3::text::date) OR day::text = $2) ORDER BY campaign, day`
	rows, err := db.Query(ctx, q, opts.Campaign, opts.Day, since)
	if err != nil {
		return nil, fmt.Errorf("export: list days: %w", err)
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var c, d string
		if err := rows.Scan(&c, &d); err != nil {
			return nil, fmt.Errorf("export: list days: %w", err)
		}
		out = append(out, [2]string{c, d})
	}
	return out, rows.Err()
}

// compareDay adds one campaign-day's findings to p.
func compareDay(ctx context.Context, db *pgxpool.Pool, l *lease.Ledger, campaign, day string, now time.Time, p *Plan) error {
	copies, err := ReadCopy(ctx, db, campaign, day)
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		return nil // no lease on record: nothing to raise
	}
	p.Days++
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return err
	}
	if n == 0 {
		p.Findings = append(p.Findings, Finding{campaign, day, -1, fmt.Sprintf(
			"not open in the ledger, but PostgreSQL recorded leases on %d shard(s) of it: the ledger lost the day; run recover again once the day is open (the reconciler or a daemon opens it)", len(copies))})
		return nil
	}
	for _, shard := range slices.Sorted(maps.Keys(copies)) {
		if shard >= n {
			p.Findings = append(p.Findings, Finding{campaign, day, shard, fmt.Sprintf("PostgreSQL recorded leases on shard %d, the ledger's day has %d shards", shard, n)})
			continue
		}
		if err := compareShard(ctx, l, lease.ShardKey{Campaign: campaign, Day: day, Shard: shard}, copies[shard], now, p); err != nil {
			return err
		}
	}
	return nil
}

// compareShard adds one shard's runs the ledger is behind on, and their
// open leases it does not hold, to p.
func compareShard(ctx context.Context, l *lease.Ledger, k lease.ShardKey, c *ShardCopy, now time.Time, p *Plan) error {
	p.Shards++
	sh, err := l.ReadShard(ctx, k)
	if err != nil {
		return err
	}
	ledger, err := l.RunTotals(ctx, k)
	if err != nil {
		return err
	}
	behind := map[string]bool{}
	for _, run := range slices.Sorted(maps.Keys(c.Runs)) {
		s, g := c.Runs[run], ledger[run]
		if s.Granted <= g.Granted && s.Returned <= g.Returned {
			continue
		}
		behind[run] = true
		p.Runs = append(p.Runs, RunBehind{Shard: k, Run: run, SQL: s, Ledger: g, Unseen: max(0, (s.Granted-s.Returned)-(g.Granted-g.Returned))})
	}
	if len(behind) == 0 {
		return nil
	}
	if sh.Closed {
		p.Findings = append(p.Findings, Finding{k.Campaign, k.Day, k.Shard,
			"closed: the day's report and carry-over are decided; recover leaves it alone (the difference is what the restore let the fleet spend twice on it)"})
	}
	held, err := l.Leases(ctx, k)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, lr := range held {
		known[lr.ID] = true
	}
	for _, lr := range c.Open {
		if behind[lease.RunOf(lr.ID)] && !known[lr.ID] && lr.Expiry.After(now) {
			p.Leases = append(p.Leases, LeaseBehind{Shard: k, Lease: lr})
		}
	}
	return nil
}

// Recovered is what Recover did.
type Recovered struct {
	Leases int   `json:"leases"` // leases recorded again
	Runs   int   `json:"runs"`   // runs whose totals raised the shard's spent
	Spent  int64 `json:"spent_micros"`
	Closed int   `json:"closed"` // shards left alone: closed
}

// Recover raises the ledger to PostgreSQL's copy as plan found it: on each
// shard, the open leases it forgot are recorded again (lease.Ledger.
// RecoverLease), then each run's totals are re-asserted (RecoverRun). Every
// step is one idempotent ledger script that reads the shard's state when it
// runs, so Recover is safe to run twice, to resume after a crash, and to
// run beside daemons re-asserting the same totals and the reconciler: a
// step finding its work done changes nothing. A closed shard is left alone
// (counted in Closed). report, if not nil, is told of each step.
func Recover(ctx context.Context, l *lease.Ledger, plan Plan, now time.Time, report func(string)) (Recovered, error) {
	if report == nil {
		report = func(string) {}
	}
	var out Recovered
	closed := map[lease.ShardKey]bool{}
	for _, lb := range plan.Leases {
		st, _, err := l.RecoverLease(ctx, lb.Shard, lb.Lease, now)
		switch {
		case errors.Is(err, lease.ErrDayClosed):
			closed[lb.Shard] = true
			continue
		case err != nil:
			return out, err
		case st == lease.Rerecorded:
			out.Leases++
			report(fmt.Sprintf("re-recorded %s lease %s of %d micros (holder %s, expiry %s)", lb.Shard, lb.Lease.ID, lb.Lease.Amount, lb.Lease.Holder, lb.Lease.Expiry.UTC().Format(time.RFC3339)))
		}
	}
	for _, rb := range plan.Runs {
		added, after, err := l.RecoverRun(ctx, rb.Shard, rb.Run, rb.SQL, now)
		switch {
		case errors.Is(err, lease.ErrDayClosed):
			closed[rb.Shard] = true
			continue
		case err != nil:
			return out, err
		case added > 0:
			out.Runs++
			out.Spent = satAdd(out.Spent, added)
			report(fmt.Sprintf("raised %s run %s: %d micros counted spent, out of what the shard could still grant (it now owes %d)", rb.Shard, rb.Run, added, after.Owed))
		}
	}
	out.Closed = len(closed)
	return out, nil
}
