package lease

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RunOf returns the daemon run a lease id belongs to: the id without its
// last "-seq" part (holder-bootID), as the scripts' run_of does; "" for an
// id with no "-".
func RunOf(leaseID string) string {
	i := strings.LastIndexByte(leaseID, '-')
	if i < 0 {
		return ""
	}
	return leaseID[:i]
}

// RunTotals returns what shard k recorded for each daemon run that leased
// from it: the micros it granted the run and the micros the run gave back
// unused (History's Granted and Returned), by run. A day not open has none.
func (l *Ledger) RunTotals(ctx context.Context, k ShardKey) (map[string]History, error) {
	m, err := l.rdb.HGetAll(ctx, k.keys()[0]).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger %s: run totals: %w", k, err)
	}
	out := map[string]History{}
	for f, v := range m {
		run, ok := strings.CutPrefix(f, "u:")
		if !ok {
			continue
		}
		gs, rs, ok := strings.Cut(v, "|")
		g, gerr := strconv.ParseInt(gs, 10, 64)
		r, rerr := strconv.ParseInt(rs, 10, 64)
		if !ok || gerr != nil || rerr != nil {
			return nil, fmt.Errorf("ledger %s: run %q totals %q: not granted|returned", k, run, v)
		}
		out[run] = History{Granted: g, Returned: r}
	}
	return out, nil
}

// RunsBehind reads, in one HMGET, what shard k recorded for each of runs
// and returns, sorted, the runs whose recorded totals are below the given
// ones (granted or returned): those ReassertRun would raise. It writes
// nothing. A day not open records none, so every run is behind (and
// ReassertRun says ErrDayNotOpen).
func (l *Ledger) RunsBehind(ctx context.Context, k ShardKey, runs map[string]History) ([]string, error) {
	names := make([]string, 0, len(runs))
	for run := range runs {
		names = append(names, run)
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	fields := make([]string, len(names))
	for i, run := range names {
		fields[i] = "u:" + run
	}
	v, err := l.rdb.HMGet(ctx, k.keys()[0], fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger %s: run totals: %w", k, err)
	}
	var behind []string
	for i, run := range names {
		var rec History
		if s, ok := v[i].(string); ok {
			gs, rs, ok := strings.Cut(s, "|")
			g, gerr := strconv.ParseInt(gs, 10, 64)
			r, rerr := strconv.ParseInt(rs, 10, 64)
			if !ok || gerr != nil || rerr != nil {
				return nil, fmt.Errorf("ledger %s: run %q totals %q: not granted|returned", k, run, s)
			}
			rec = History{Granted: g, Returned: r}
		}
		if want := runs[run]; want.Granted > rec.Granted || want.Returned > rec.Returned {
			behind = append(behind, run)
		}
	}
	return behind, nil
}

// RecoverRun is ReassertRun for a recovery from a second copy of the
// ledger (pacerctl recover --from-sql): the same re-assertion of a run's
// totals, except that a closed shard is left alone (ErrDayClosed): its
// day's report and carry-over are decided, and raising its spent now would
// not take back what the next day was given.
func (l *Ledger) RecoverRun(ctx context.Context, k ShardKey, run string, totals History, now time.Time) (int64, Shard, error) {
	if run == "" || totals.Granted < 0 || totals.Returned < 0 || totals.Returned > totals.Granted {
		return 0, Shard{}, fmt.Errorf("ledger %s: recover run %q totals %d/%d: malformed", k, run, totals.Granted, totals.Returned)
	}
	rep, err := l.run(ctx, reassertRun, k, run, totals.Granted, totals.Returned, now.UnixMilli(), l.cfg.AuditMaxLen, 1)
	if err == nil && rep.Status == runShardClosed {
		return 0, rep.Shard, fmt.Errorf("ledger %s: recover run %q: %w", k, run, ErrDayClosed)
	}
	return rep.Value, rep.Shard, err
}

// RecoverLease is Reassert for a recovery from a second copy of the
// ledger: a lease that copy holds open and the ledger forgot is recorded
// again, except on a closed shard (ErrDayClosed).
func (l *Ledger) RecoverLease(ctx context.Context, k ShardKey, lr LeaseRecord, now time.Time) (Reasserted, Shard, error) {
	if lr.ID == "" || lr.Amount <= 0 || lr.Amount > MaxBudgetMicros {
		return 0, Shard{}, fmt.Errorf("ledger %s: recover lease %q of %d micros: malformed", k, lr.ID, lr.Amount)
	}
	rep, err := l.run(ctx, reassertScript, k, lr.ID, lr.Holder, lr.Amount, lr.Expiry.UnixMilli(), now.UnixMilli(), l.cfg.AuditMaxLen, 1)
	if err != nil {
		return 0, Shard{}, err
	}
	status, sh := rep.Status, rep.Shard
	if status == reassertShardClosed {
		return 0, sh, fmt.Errorf("ledger %s: recover lease %q: %w", k, lr.ID, ErrDayClosed)
	}
	return Reasserted(status), sh, nil
}
