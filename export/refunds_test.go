package export_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
)

// clientCounts is what a bidder counted over the socket, per hour (UTC):
// micros allowed and micros refunded.
type clientCounts map[time.Time]*[2]int64

func (c clientCounts) add(h time.Time, i int, v int64) {
	if c[h] == nil {
		c[h] = &[2]int64{}
	}
	c[h][i] += v
}

// A real pacerd's SPENDs and REFUNDs over its Unix socket, on a real
// redis-server, exported into a real PostgreSQL: spend_days and every hour
// of spend_hours hold the micros refunded exactly as the bidder counted
// them, spent is what it was allowed less what it refunded, and the SQL
// totals still agree with the ledger's counters on every field reconcile
// compares. Two stretches of spending, in hours 10 and 11, with the
// daemon's leases ended (released) between them, so each hour's refunds
// reach the ledger in their hour.
func TestRefundsOverTheSocketArriveInSQL(t *testing.T) {
	f := newFixture(t, lease.Config{})
	const id = "refunds"
	c := lease.Campaign{ID: id, DailyMicros: 8_640_000_000, TZ: "UTC", Curve: "flat", Shards: 2, State: lease.StateActive}
	if _, err := f.ledger.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	clock := clocktest.At(t0.Add(10 * time.Hour))
	d, err := daemon.New(f.ledger, daemon.Config{Holder: "h1", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close(ctx)
		}
	})
	cl := serve(t, d)

	counted := clientCounts{}
	seq := 0
	stretch := func(from time.Time) {
		clock.Set(from)
		for range 240 { // four minutes, a second a step
			clock.Add(time.Second)
			d.Step(ctx)
			h := clock.Now().Truncate(time.Hour)
			for i := range 5 {
				seq++
				auction := "a" + strconv.Itoa(seq)
				amount := int64(1_000 + 97*(seq%13))
				dec, err := cl.Spend(ctx, id, amount, auction)
				if err != nil {
					t.Fatal(err)
				}
				if dec != pacer.Allowed {
					continue
				}
				counted.add(h, 0, amount)
				// Every third allowed auction is refunded: in full, or in part.
				if i%3 == 0 {
					part := amount / int64(1+seq%2)
					if err := cl.Refund(ctx, id, part, auction); err != nil {
						t.Fatal(err)
					}
					counted.add(h, 1, part)
				}
			}
		}
	}
	stretch(t0.Add(10 * time.Hour))
	// An idle half hour: the leases end and are released in hour 10.
	for range 30 {
		clock.Add(time.Minute)
		d.Step(ctx)
	}
	stretch(t0.Add(11*time.Hour + 5*time.Minute))
	if err := d.Close(ctx); err != nil { // releases every lease
		t.Fatal(err)
	}
	closed = true
	if v := infoField(d, "refunds_unbacked_micros"); v != "0" {
		t.Fatalf("refunds_unbacked_micros %s: every refund here follows its SPEND in the same lease", v)
	}

	passes(t, f.exporter("e", export.Config{}))
	var allowed, refunded int64
	for h, v := range counted {
		allowed += v[0]
		refunded += v[1]
		var sqlRefunded, sqlSpent int64
		if err := f.db.QueryRow(ctx, `SELECT refunded, spent FROM spend_hours WHERE campaign = $1 AND day = $2::text::date AND hour = $3`,
			id, day, h).Scan(&sqlRefunded, &sqlSpent); err != nil {
			t.Fatalf("hour %v: %v", h, err)
		}
		if sqlRefunded != v[1] || sqlSpent != v[0]-v[1] {
			t.Errorf("hour %v: refunded %d, spent %d in SQL; the bidder counted %d refunded of %d allowed (spent %d)",
				h.Format("15:04"), sqlRefunded, sqlSpent, v[1], v[0], v[0]-v[1])
		}
	}
	if len(counted) != 2 || refunded == 0 {
		t.Fatalf("the bidder's counts cover hours %v, %d refunded: the test wants two hours with refunds", counted, refunded)
	}
	tot, ok, err := export.DayTotals(ctx, f.db, id, day)
	if err != nil || !ok {
		t.Fatalf("day totals: %v, %v", ok, err)
	}
	if tot.Refunded != refunded || tot.Spent != allowed-refunded || tot.Lost != 0 {
		t.Errorf("spend_days: refunded %d, spent %d, lost %d; the bidder counted %d refunded of %d allowed",
			tot.Refunded, tot.Spent, tot.Lost, refunded, allowed)
	}
	f.agrees(t)
}

// serve serves d on a Unix socket in a fresh temporary directory and
// returns a client of it.
func serve(t *testing.T, d *daemon.Daemon) *transport.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "pacer-export-") // t.TempDir() can be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "pacer.sock")
	ln, err := transport.ListenUnix(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := transport.NewServer(d, transport.ServerConfig{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	cl, err := transport.Dial(ctx, sock, transport.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func infoField(d *daemon.Daemon, name string) string {
	for _, f := range d.Info() {
		if f.Key == name {
			return f.Value
		}
	}
	return ""
}
