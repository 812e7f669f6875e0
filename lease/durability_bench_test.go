package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// BenchmarkGrantDurability measures one lease grant (the grant script on a
// real redis-server over its Unix socket, as the daemon calls it) under each
// durability setup: what the policy costs a ledger call. SPENDs never reach
// Redis, so none of this is on their path.
//
//	go test -run '^$' -bench GrantDurability -benchtime 2000x ./lease/
func BenchmarkGrantDurability(b *testing.B) {
	for _, bc := range []struct {
		name   string
		policy Durability
		opt    redisproc.Options
	}{
		{"none_no_aof", Durability{Policy: PolicyNone}, redisproc.Options{}},
		{"everysec", Durability{Policy: PolicyNone}, redisproc.Options{Persistent: true, AppendFsync: "everysec"}},
		{"fsync_always", Durability{}, redisproc.Options{Persistent: true}},
		{"replicas_1_wait", Durability{Policy: PolicyReplicas, Replicas: 1}, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			srv := redistest.StartWith(b, bc.opt)
			rdb := srv.Client()
			if bc.policy.Policy == PolicyReplicas {
				redistest.StartWith(b, redisproc.Options{ReplicaOf: srv.Addr})
				// Wait for the replica's first ack (see waitReplicas in the tests).
				conn := rdb.Conn()
				for {
					conn.Incr(ctx, "settle")
					if n, _ := conn.Wait(ctx, 1, 2*time.Second).Result(); n == 1 {
						break
					}
				}
				conn.Close()
			}
			l := New(rdb, Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
			now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
			c := Campaign{ID: "bench", DailyMicros: MaxBudgetMicros / 2, TZ: "UTC", Curve: "flat", Shards: 1, State: StateActive}
			if _, err := l.OpenDay(ctx, c, "2026-11-21", now.Truncate(24*time.Hour), now); err != nil {
				b.Fatal(err)
			}
			k := ShardKey{"bench", "2026-11-21", 0}
			if _, err := CheckDurability(ctx, rdb, bc.policy, nil); err != nil {
				b.Fatal(err)
			}
			cpu0 := redisCPU(b, srv)
			b.ResetTimer()
			for i := range b.N {
				_, err := bc.policy.run(ctx, rdb, grantScript, k.keys(),
					"l"+strconv.Itoa(i), "h", 1000, now.Add(30*time.Second).UnixMilli(), now.UnixMilli(),
					now.Add(100*24*time.Hour).UnixMilli(), 1000, 0, 0,
					callNumbers(1_000_000_000, 1_000_000_000, 4000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)).Int64Slice()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((redisCPU(b, srv)-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// redisCPU is the master's user+system CPU seconds so far (INFO cpu).
func redisCPU(b *testing.B, srv *redistest.Server) float64 {
	m, err := info(context.Background(), srv.Client(), "cpu")
	if err != nil {
		b.Fatal(err)
	}
	u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	return u + s
}
