package export

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// BenchmarkExportThroughput is the exporter's sustained throughput, with
// each process's CPU time per event, against the statement the schema
// before migration 3 used, side by side in one run. A PostgreSQL on the
// same machine (fsync on) holds two databases: "old" at schema version 2,
// written by that version's one statement (legacyCommit: INSERT … SELECT
// FROM unnest(…) ON CONFLICT DO NOTHING RETURNING, keyed by text, every
// entry's fields copied as jsonb, a (campaign, at) b-tree, the totals joined
// with the rows inserted), and "new" at this build's schema, written by
// commit (COPY, a compact key, totals summed in Go). Each round fills 8
// shards' streams with 25,000 release entries each (as the ledger writes
// them) for each way, then exports them with the default settings (8
// streams at once, batches of 1,000) until none is left; the ways alternate
// which goes first. Per way it reports events/s of wall time and CPU µs per
// event of the exporter (this process: getrusage), PostgreSQL (all its
// processes, from /proc) and redis-server (INFO cpu); per round it logs the
// figures, the ratios new/old and the load average. Run it with
// GOMAXPROCS=1 for "one core":
//
//	GOMAXPROCS=1 go test -run '^$' -bench ExportThroughput -benchtime 1x -v ./export/
//
// make bench-export-throughput runs it so.
func BenchmarkExportThroughput(b *testing.B) {
	ctx := context.Background()
	pgSrv := pgtest.OwnDurable(b)
	_, oldDB := pgtest.Pool(b, pgSrv)
	newDSN, _ := pgtest.Pool(b, pgSrv)
	newDB, err := NewPool(ctx, newDSN, DefaultStreams)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(newDB.Close)
	if _, err := migrate(ctx, oldDB, 2); err != nil {
		b.Fatal(err)
	}
	if _, err := Migrate(ctx, newDB); err != nil {
		b.Fatal(err)
	}
	rdb := redistest.Start(b).Client()
	ledger := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	ways := []throughputWay{{name: "old", db: oldDB, legacy: true}, {name: "new", db: newDB}}
	round := 0
	for range b.N {
		for r := range 3 {
			first := r % 2
			res := map[string]throughput{}
			for i := range ways {
				w := ways[(first+i)%2]
				res[w.name] = w.run(b, ctx, rdb, ledger, pgSrv, fmt.Sprintf("r%d-%s", round, w.name))
			}
			round++
			o, n := res["old"], res["new"]
			b.Logf("round %d (%s first), load average %s", r, ways[first].name, loadAverageNow())
			for _, w := range []string{"old", "new"} {
				x := res[w]
				b.Logf("  %-3s %8.0f events/s  CPU µs/event: exporter %5.2f  PostgreSQL %5.2f  redis %5.2f", w, x.perSecond, x.exporter, x.postgres, x.redis)
			}
			b.Logf("  new/old: events/s %.2f  exporter %.2f  PostgreSQL %.2f", n.perSecond/o.perSecond, n.exporter/o.exporter, n.postgres/o.postgres)
			if r == 2 {
				for _, w := range []string{"old", "new"} {
					b.ReportMetric(res[w].perSecond, w+"-events/s")
					b.ReportMetric(res[w].exporter*1000, w+"-exporter-cpu-ns/event")
					b.ReportMetric(res[w].postgres*1000, w+"-pg-cpu-ns/event")
				}
			}
		}
	}
}

// throughputWay is one side of BenchmarkExportThroughput.
type throughputWay struct {
	name   string
	db     *pgxpool.Pool
	legacy bool
	cfg    Config // Consumer is set by run
}

// throughput is one way's round: events/s, and CPU µs per event by process.
type throughput struct{ perSecond, exporter, postgres, redis float64 }

func (w throughputWay) run(b *testing.B, ctx context.Context, rdb *redis.Client, ledger *lease.Ledger, pgSrv *pgtest.Server, campaign string) throughput {
	const shards, perShard = 8, 25_000
	c := lease.Campaign{ID: campaign, DailyMicros: 100_000_000_000, TZ: "UTC", Curve: "flat", Shards: shards, State: lease.StateActive}
	day := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	if _, err := ledger.PutCampaign(ctx, c); err != nil {
		b.Fatal(err)
	}
	if _, err := ledger.OpenDay(ctx, c, day.Format(time.DateOnly), day, day); err != nil {
		b.Fatal(err)
	}
	fillStreams(b, ctx, rdb, campaign, day, shards, perShard)
	cfg := w.cfg
	cfg.Consumer = w.name
	e := New(rdb, ledger, w.db, cfg, nil, nil)
	if w.legacy {
		e.store.commitWith = func(ctx context.Context, k lease.ShardKey, evs []event) (int, error) {
			return legacyCommit(ctx, w.db, k, evs, nil)
		}
	}
	cpu0, pg0, redis0 := SelfCPU(b), ServerCPU(b, pgSrv), RedisCPU(b, rdb)
	start := time.Now()
	var n int64
	for n < shards*perShard {
		st, err := e.Pass(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.Exported == 0 {
			b.Fatalf("%s: a pass exported nothing with %d of %d exported", w.name, n, shards*perShard)
		}
		n += st.Exported
	}
	wall := time.Since(start)
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(n) }
	return throughput{perSecond: float64(n) / wall.Seconds(), exporter: per(SelfCPU(b) - cpu0),
		postgres: per(ServerCPU(b, pgSrv) - pg0), redis: per(RedisCPU(b, rdb) - redis0)}
}

// fillStreams appends n release entries to each of the campaign-day's
// shards' streams, as the ledger writes them.
func fillStreams(b *testing.B, ctx context.Context, rdb *redis.Client, campaign string, day time.Time, shards, n int) {
	for s := range shards {
		k := lease.ShardKey{Campaign: campaign, Day: day.Format(time.DateOnly), Shard: s}
		p := rdb.Pipeline()
		for i := range n {
			ms := strconv.FormatInt(day.Add(10*time.Hour+time.Duration(i)*time.Millisecond).UnixMilli(), 10)
			p.XAdd(ctx, &redis.XAddArgs{Stream: k.AuditKey(), Values: []any{"ev", "release", "lease", "h1-b0-" + strconv.Itoa(i),
				"holder", "h1", "amount", "25000", "unused", "1250", "ms", ms}})
			if i%5000 == 4999 || i == n-1 {
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// procCPU is process pid's CPU time (user and system) from /proc, in
// clock ticks of 10 ms.
func procCPU(b *testing.B, pid int) time.Duration {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	s := string(st)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * 10 * time.Millisecond
}

// BenchmarkExportStatement shows where PostgreSQL's time goes in a batch's
// transaction (commit): 50 batches of 1,000 release entries of 8 streams
// written, then rounds of 60 batches, one at a time, each reporting
// PostgreSQL's CPU time per event (all its processes, and the backend's
// alone, from /proc): as exported, twice; then with parts of the work taken
// away, in this order (they change the database, on a server of its own):
// autovacuum off for ledger_events, the BRIN index on at dropped, the
// primary key dropped, the table unlogged (no WAL).
//
//	go test -run '^$' -bench ExportStatement -benchtime 1x -v ./export/
func BenchmarkExportStatement(b *testing.B) {
	for range b.N {
		exportStatement(b)
	}
}

func exportStatement(b *testing.B) {
	ctx := context.Background()
	srv := pgtest.OwnDurable(b)
	dsn, _ := pgtest.Pool(b, srv)
	db, err := pgxpool.New(ctx, dsn+" pool_max_conns=1") // one backend, whose CPU is logged apart
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	var pid int
	if err := db.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	s := &store{db: db, step: func(context.Context, string) error { return nil }, now: time.Now, zones: &zones{byID: map[string]*time.Location{"bench": time.UTC}}}
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	nb := 0
	batch := func(shard int) (lease.ShardKey, []event) {
		k := lease.ShardKey{Campaign: "bench", Day: "2026-11-21", Shard: shard}
		evs := make([]event, 1000)
		for i := range evs {
			n := nb*1000 + i
			at := t0.Add(time.Duration(n) * time.Millisecond)
			evs[i] = event{id: streamID{at.UnixMilli(), 0}, kind: "release", micros: 25000, unused: 1250, ref: "h1-b0-" + strconv.Itoa(n), holder: "h1", at: at}
		}
		nb++
		return k, evs
	}
	for range 50 {
		k, evs := batch(nb % 8)
		if _, err := s.commit(ctx, k, evs); err != nil {
			b.Fatal(err)
		}
	}
	step := func(sql string) {
		if _, err := db.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	round := func(name string) {
		c0, _ := srv.CPU()
		p0 := procCPU(b, pid)
		for range 60 {
			k, evs := batch(nb % 8)
			if _, err := s.commit(ctx, k, evs); err != nil {
				b.Fatal(err)
			}
		}
		c1, _ := srv.CPU()
		p1 := procCPU(b, pid)
		b.Logf("%-20s PostgreSQL CPU %5.1f µs an event, its backend %5.1f", name, float64((c1-c0).Nanoseconds())/60_000/1000, float64((p1-p0).Nanoseconds())/60_000/1000)
	}
	b.Logf("load average %s", loadAverageNow())
	round("as exported")
	round("as exported")
	step("ALTER TABLE ledger_events SET (autovacuum_enabled = off)")
	round("no autovacuum")
	step("DROP INDEX ledger_events_at")
	round("no brin")
	step("ALTER TABLE ledger_events DROP CONSTRAINT ledger_events_pkey")
	round("no pk")
	step("ALTER TABLE ledger_events SET UNLOGGED")
	round("unlogged")
	b.Logf("load average %s", loadAverageNow())
}

// SelfCPU is this process's CPU time so far (getrusage), for the
// benchmarks of this package and of package export_test.
func SelfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ServerCPU is PostgreSQL server s's CPU time so far (pgtest.Server.CPU).
func ServerCPU(b *testing.B, s *pgtest.Server) time.Duration {
	d, err := s.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// RedisCPU is redis-server's CPU time so far (INFO cpu: used_cpu_sys and
// used_cpu_user).
func RedisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sec += x
		}
	}
	return time.Duration(sec * float64(time.Second))
}

func loadAverageNow() string {
	l, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(l))[:3], " ")
}
