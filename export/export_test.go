package export_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

var (
	ctx = context.Background()
	t0  = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	pg  pgtest.Shared
)

const (
	ppb = 1_000_000_000
	day = "2026-11-21"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &pg)) }

// fixture is a real redis-server with a ledger, and a migrated PostgreSQL
// database.
type fixture struct {
	srv    *redistest.Server
	rdb    *redis.Client
	ledger *lease.Ledger
	db     *pgxpool.Pool
}

func newFixture(t testing.TB, lcfg lease.Config) *fixture {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	lcfg.Retention = 100 * 365 * 24 * time.Hour // test days are in the past
	return &fixture{srv: srv, rdb: rdb, ledger: lease.New(rdb, lcfg, nil), db: openDB(t, pg.DB(t))}
}

func openDB(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := export.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

func (f *fixture) exporter(consumer string, cfg export.Config) *export.Exporter {
	cfg.Consumer = consumer
	return export.New(f.rdb, f.ledger, f.db, cfg, nil, nil)
}

// open stores a campaign of shards shards and opens its day.
func (f *fixture) open(t testing.TB, id string, shards int) {
	t.Helper()
	c := lease.Campaign{ID: id, DailyMicros: 100_000_000_000, TZ: "UTC", Curve: "flat", Shards: shards, State: lease.StateActive}
	if _, err := f.ledger.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.OpenDay(ctx, c, day, t0, t0); err != nil {
		t.Fatal(err)
	}
}

// spend writes n leases' worth of money on every shard of campaign id:
// grants, then releases with some unused, or settlement as lost (every
// fifth lease), and a budget cut: about 2n+ events per shard.
func (f *fixture) spend(t *testing.T, id string, shards, n int, tag string, at time.Time) {
	t.Helper()
	for s := range shards {
		k := lease.ShardKey{Campaign: id, Day: day, Shard: s}
		for i := range n {
			lid := tag + "-" + strconv.Itoa(s) + "-" + strconv.Itoa(i)
			g, err := f.ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: lid, Holder: "h1", Want: 10_000,
				Expiry: at.Add(30 * time.Second), Now: at, Pace: lease.Pace{Now: ppb / 2, Cap: ppb/2 + ppb/8},
				Grace: 5 * time.Second, DayStart: t0})
			if err != nil {
				t.Fatal(err)
			}
			if i%5 == 4 {
				continue // left to expire: settled as lost below
			}
			if _, err := f.ledger.Release(ctx, k, lid, g.Granted/(int64(i%3)+2), at); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.ledger.Settle(ctx, k, at.Add(time.Minute), 5*time.Second, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.ledger.AdjustDay(ctx, id, day, 99_000_000_000-int64(len(tag))*1_000_000, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// passes runs passes until one exports nothing new (at most 20).
func passes(t *testing.T, e *export.Exporter) {
	t.Helper()
	for range 20 {
		st, err := e.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exported == 0 && st.Duplicates == 0 {
			return
		}
	}
	t.Fatal("20 passes and the export still moves")
}

// exact asserts that PostgreSQL holds every audit event of the day exactly
// once: its totals equal the ledger's report counters on every field,
// ledger_events has one row per event the shards counted, and the cursors
// count the same.
func (f *fixture) exact(t *testing.T) {
	t.Helper()
	f.agrees(t)
	streams, err := f.ledger.AuditStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, k := range streams {
		n, _, err := f.ledger.AuditEvents(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want += n
	}
	var rows, cursorEvents int64
	if err := f.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_events), (SELECT coalesce(sum(events), 0) FROM export_cursors)`).Scan(&rows, &cursorEvents); err != nil {
		t.Fatal(err)
	}
	var gaps int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM export_gaps`).Scan(&gaps); err != nil || gaps != 0 {
		t.Fatalf("export_gaps holds %d rows (%v): the export skipped entries", gaps, err)
	}
	if rows != want || cursorEvents != want {
		t.Fatalf("ledger_events holds %d rows, the cursors count %d, the shards wrote %d events", rows, cursorEvents, want)
	}
}

// agrees asserts that PostgreSQL's totals equal the ledger's report
// counters on every field of every campaign-day the ledger holds.
func (f *fixture) agrees(t testing.TB) {
	t.Helper()
	diffs, days, err := export.Reconcile(ctx, f.db, f.ledger, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("reconcile: %s", d)
	}
	if days == 0 {
		t.Fatal("reconcile compared no day")
	}
}

var errCrash = errors.New("crashed here")

// The exporter is stopped at every step of a batch's export, with entries
// of the batch in every state (read, in an open transaction, committed and
// not acknowledged, acknowledged and not trimmed); then a new run under the
// same consumer name, or another consumer that takes the dead one's entries
// over (XAUTOCLAIM), finishes the export while the ledger writes more:
// PostgreSQL ends with every event exactly once (rows = the shards' event
// counters; every total = the ledger's report), against a real redis-server
// and a real PostgreSQL 15.
func TestCrashAtEveryStepLosesAndDuplicatesNothing(t *testing.T) {
	steps := []string{"read", "encoded", "copied", "committed", "acked", "trimmed"}
	for _, step := range steps {
		for _, takeover := range []bool{false, true} {
			name := step + "/restart"
			if takeover {
				name = step + "/takeover"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, lease.Config{})
				f.open(t, "c", 2)
				f.spend(t, "c", 2, 20, "a", t0.Add(10*time.Hour))
				seen := 0
				crashing := f.exporter("one", export.Config{Batch: 7, Step: func(_ context.Context, s string) error {
					if s == step {
						if seen++; seen == 2 {
							return errCrash
						}
					}
					return nil
				}})
				var err error
				for i := 0; i < 10 && err == nil; i++ {
					_, err = crashing.Pass(ctx)
				}
				if !errors.Is(err, errCrash) {
					t.Fatalf("the exporter never reached step %s a second time (%v): the test crashes nothing", step, err)
				}
				f.spend(t, "c", 2, 10, "b", t0.Add(11*time.Hour))
				next := f.exporter("one", export.Config{Batch: 7})
				if takeover {
					// The dead consumer's entries were delivered before
					// the ledger wrote more: idle for over a millisecond.
					next = f.exporter("two", export.Config{Batch: 7, ClaimIdle: time.Millisecond})
				}
				passes(t, next)
				f.exact(t)
				if n := f.rdb.XLen(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 0}.AuditKey()).Val(); n > 8 {
					t.Errorf("after the export the stream still holds %d entries: not trimmed", n)
				}
			})
		}
	}
}

func gaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func errorsTotal(t *testing.T, m *export.Metrics) float64 {
	t.Helper()
	var n float64
	for _, stage := range []string{"redis", "sql", "entry"} {
		n += counterValue(t, m.Errors.WithLabelValues(stage))
	}
	return n
}

// A row PostgreSQL already holds past the stream's cursor (written by hand,
// not by an exporter, which moves the cursor with its rows) is skipped, not
// counted, and fails nothing: every other entry is written once.
func TestRowPastTheCursorWrittenByHand(t *testing.T) {
	f := newFixture(t, lease.Config{})
	f.open(t, "c", 1)
	f.spend(t, "c", 1, 10, "a", t0.Add(10*time.Hour))
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	msgs, err := f.rdb.XRange(ctx, k.AuditKey(), "-", "+").Result()
	if err != nil || len(msgs) < 10 {
		t.Fatalf("the stream holds %d entries (%v)", len(msgs), err)
	}
	id := msgs[5].ID
	ms, seq, _ := strings.Cut(id, "-")
	// The stream's cursor row, at 0-0, gives it its id; the row is past it,
	// so the exporter's COPY of the batch hits the unique key.
	if _, err := f.db.Exec(ctx, `WITH c AS (INSERT INTO export_cursors (campaign, day, shard, last_ms, last_seq, events, updated_at)
			VALUES ('c', $1::text::date, 0, 0, 0, 0, now()) RETURNING stream)
		INSERT INTO ledger_events (stream, campaign, day, shard, entry_ms, entry_seq, kind, micros, unused, refunded, ref, holder, at)
		SELECT c.stream, 'c', $1::text::date, 0, $2::text::bigint, $3::text::bigint, 'grant', 0, 0, 0, '', '', now() FROM c`, day, ms, seq); err != nil {
		t.Fatal(err)
	}
	st, err := f.exporter("one", export.Config{}).Pass(ctx)
	if err != nil {
		t.Fatalf("the pass failed on the row written by hand: %v", err)
	}
	if st.Exported != int64(len(msgs)-1) || st.Duplicates != 1 {
		t.Errorf("exported %d and skipped %d of %d entries, want %d and 1", st.Exported, st.Duplicates, len(msgs), len(msgs)-1)
	}
	var rows, events int64
	if err := f.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_events), (SELECT events FROM export_cursors)`).Scan(&rows, &events); err != nil {
		t.Fatal(err)
	}
	if rows != int64(len(msgs)) || events != int64(len(msgs)-1) {
		t.Errorf("ledger_events holds %d rows and the cursor counts %d, want %d and %d", rows, events, len(msgs), len(msgs)-1)
	}
}
