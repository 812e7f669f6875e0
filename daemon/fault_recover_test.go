package daemon_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// The restore of TestFaultRedisRestoredFromAnOlderAOF under fresh daemons,
// with pacer-export's exporter copying the ledger into a real PostgreSQL
// after every round and pacerctl recover's steps run while the
// reconciler's freeze holds: the clients are allowed at most the budget
// plus what they netted after the exporter's last pass (docs/GUARANTEES.md,
// "Bounded"). Without the recovery (the "fresh daemons" case) the lost
// window is granted again.
func TestFaultRestoreRecoveredFromSQL(t *testing.T) {
	r := runAOFRestore(t, true, true)
	over := r.net() - r.budget
	t.Logf("fresh daemons, recovered from PostgreSQL: clients netted %d of %d (allowed %d, refunded %d): overspend %d (%+.2f%% of the budget); %d netted in the lost window, %d after the export's last pass; recover: %+v",
		r.net(), r.budget, r.allowed, r.refunded, max(over, 0), 100*float64(over)/float64(r.budget), r.window, r.unexported, r.recovered)
	if r.recovered.Spent == 0 {
		t.Fatalf("recover counted nothing spent: %+v", r.recovered)
	}
	if over > r.unexported {
		t.Fatalf("clients netted %d on a budget of %d: %d over, more than the %d netted after the export's last pass", r.net(), r.budget, over, r.unexported)
	}
}

// sqlCopy is pacer-export writing the ledger into a real PostgreSQL.
type sqlCopy struct {
	db        *pgxpool.Pool
	e         *export.Exporter
	netAtPass int64 // what the clients had netted at the last pass
}

func newSQLCopy(t *testing.T, rdb *redis.Client, l *lease.Ledger) *sqlCopy {
	t.Helper()
	_, db := pgtest.Pool(t, pgtest.Own(t))
	if _, err := export.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return &sqlCopy{db: db, e: export.New(rdb, l, db, export.Config{}, nil, nil)}
}

// pass exports what the ledger wrote since the last pass; net is what the
// clients had netted before it began.
func (c *sqlCopy) pass(t *testing.T, net int64) {
	t.Helper()
	if _, err := c.e.Pass(ctx); err != nil {
		t.Fatalf("export pass: %v", err)
	}
	c.netAtPass = net
}

// recover is `pacerctl recover --from-sql`: compare, then raise.
func (c *sqlCopy) recover(t *testing.T, l *lease.Ledger, now time.Time) export.Recovered {
	t.Helper()
	plan, err := export.CompareCopy(ctx, c.db, l, export.CompareOptions{Day: day, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	got, err := export.Recover(ctx, l, plan, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recover: %d runs behind, %d micros consumed the restored ledger did not count, %d leases open in PostgreSQL; %+v",
		len(plan.Runs), plan.Unseen(), len(plan.Leases), got)
	return got
}
