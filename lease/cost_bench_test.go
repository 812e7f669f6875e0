package lease_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// BenchmarkLeaseCallRedisCPU is what the daemons' lease calls cost Redis
// (issue 13's master count rests on it): one op is a grant and its renewal
// (the pair a busy campaign's host makes every lease window), with the
// history, fairness and index bookkeeping of the real scripts, on a real
// redis-server without persistence. redis-cpu-µs/call is the server's
// user+system CPU (INFO cpu) per script call, network I/O included.
func BenchmarkLeaseCallRedisCPU(b *testing.B) {
	srv := redistest.Start(b)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	c := lease.Campaign{ID: "c", DailyMicros: 86_400_000_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		b.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, "2026-11-21", t0, t0); err != nil {
		b.Fatal(err)
	}
	k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: 0}
	now := t0.Add(12 * time.Hour)
	var known lease.History
	req := func(id string) lease.GrantRequest {
		return lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h1", Want: 1000, Expiry: now.Add(30 * time.Second), Now: now,
			Pace: lease.Pace{Now: ppb / 2, Cap: ppb/2 + ppb/288}, Grace: 5 * time.Second, DayStart: t0, Known: known}
	}
	cpu0 := serverCPU(b, srv)
	b.ResetTimer()
	for i := range b.N {
		id := "l" + strconv.Itoa(i)
		g, err := l.Grant(ctx, req(id))
		if err != nil {
			b.Fatal(err)
		}
		known = g.Shard.History()
		now = now.Add(15 * time.Second)
		g, err = l.Renew(ctx, id, 0, req(id+"r"))
		if err != nil {
			b.Fatal(err)
		}
		known = g.Shard.History()
		if _, err := l.Release(ctx, k, id+"r", 0, now); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((serverCPU(b, srv)-cpu0)*1e6/float64(3*b.N), "redis-cpu-µs/call")
}

// serverCPU is redis-server's user+system CPU seconds so far (INFO cpu).
func serverCPU(b *testing.B, srv *redistest.Server) float64 {
	b.Helper()
	info, err := srv.Client().Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			x, _ := strconv.ParseFloat(v, 64)
			s += x
		}
	}
	return s
}
