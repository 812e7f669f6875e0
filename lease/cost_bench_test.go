package lease_test

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// BenchmarkLeaseCallRedisCPU is what the daemons' lease calls cost Redis
// (issue 13's master count rests on it): one op is a grant, its renewal
// and the release (the calls a busy campaign's host makes), with the
// history, fairness and index bookkeeping of the real scripts.
// redis-cpu-µs/call is the server's user+system CPU (INFO cpu) per script
// call, network I/O and AOF included; redis-cmds/call the Redis commands
// each script ran (INFO commandstats).
//
// The cases separate what a call costs from what the benchmark makes it
// cost:
//   - aof: appendfsync always, as production runs it (ledger.durability
//     fsync); none: no AOF, the scripts' own cost.
//   - 1-client: one call at a time, so every call pays its own AOF write
//     and fsync; 32-clients: 32 concurrent callers, so calls share the
//     write and fsync of an event-loop round, as on a busy master.
//   - bare: one holder, no demand, the shard's only lease released at
//     every op (what this benchmark measured first); busy: each caller
//     passes its demand as daemons do (fair shares), and the shard keeps
//     another holder's lease, so its leases key never empties.
//   - settle: the reconciler's settle call on a shard with a live lease and
//     nothing yet to settle (what its sweeps and full passes mostly make).
func BenchmarkLeaseCallRedisCPU(b *testing.B) {
	for _, aof := range []bool{true, false} {
		name := map[bool]string{true: "aof", false: "none"}[aof] + "/1-clients/settle"
		b.Run(name, func(b *testing.B) { benchSettleCalls(b, aof) })
		for _, clients := range []int{1, 32} {
			for _, busy := range []bool{false, true} {
				if clients > 1 && !busy {
					continue
				}
				name := map[bool]string{true: "aof", false: "none"}[aof] + "/" + strconv.Itoa(clients) + "-clients/" +
					map[bool]string{true: "busy", false: "bare"}[busy]
				b.Run(name, func(b *testing.B) { benchLeaseCalls(b, aof, clients, busy) })
			}
		}
	}
}

// benchDay is a redis-server (with AOF, appendfsync always, or none) and a
// ledger over it with campaign c's 8 shards of 2026-11-21 open.
// PACER_LEASE_PACKED=1 turns on the ledger's Config.PackedCounters.
func benchDay(b *testing.B, aof bool) (*redistest.Server, *lease.Ledger) {
	srv := redistest.StartWith(b, redisproc.Options{Persistent: aof})
	packed := os.Getenv("PACER_LEASE_PACKED") == "1"
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, PackedCounters: packed}, nil)
	c := lease.Campaign{ID: "c", DailyMicros: 86_400_000_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		b.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, "2026-11-21", t0, t0); err != nil {
		b.Fatal(err)
	}
	return srv, l
}

func benchLeaseCalls(b *testing.B, aof bool, clients int, busy bool) {
	srv, l := benchDay(b, aof)
	rdb := srv.Client()
	start := t0.Add(12 * time.Hour)
	req := func(k lease.ShardKey, id, holder string, now time.Time, known lease.History) lease.GrantRequest {
		r := lease.GrantRequest{Shard: k, LeaseID: id, Holder: holder, Want: 1000, Expiry: now.Add(30 * time.Second), Now: now,
			Pace: lease.Pace{Now: ppb / 2, Cap: ppb/2 + ppb/288}, Grace: 5 * time.Second, DayStart: t0, Known: known}
		if busy {
			r.Demand, r.DemandTTL = 1000, time.Minute
			r.Pace.Unit, r.Pace.CatchUpPermille = 1000, 1500
		}
		return r
	}
	if busy {
		for s := range 8 {
			k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: s}
			r := req(k, "held", "other", start, lease.History{})
			r.Expiry = start.Add(time.Hour)
			if _, err := l.Grant(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	var next atomic.Int64
	worker := func(ops func() bool) {
		g := int(next.Add(1) - 1)
		k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: g % 8}
		holder := "h" + strconv.Itoa(g)
		now := start
		var known lease.History
		for i := 0; ops(); i++ {
			id := holder + "-" + strconv.Itoa(i)
			gr, err := l.Grant(ctx, req(k, id, holder, now, known))
			if err != nil {
				b.Error(err)
				return
			}
			known = gr.Shard.History()
			if clients == 1 {
				now = now.Add(15 * time.Second) // concurrent callers keep one clock, so none settles another's lease
			}
			gr, err = l.Renew(ctx, id, 0, req(k, id+"r", holder, now, known))
			if err != nil {
				b.Error(err)
				return
			}
			known = gr.Shard.History()
			sh, err := l.Release(ctx, k, id+"r", 0, now)
			if err != nil {
				b.Error(err)
				return
			}
			known = sh.History()
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, srv)
	b.ResetTimer()
	if clients == 1 {
		n := 0
		worker(func() bool { n++; return n <= b.N })
	} else {
		b.SetParallelism((clients + 1) / 2) // GOMAXPROCS × this goroutines: 32 on this 2-core VM
		b.RunParallel(func(pb *testing.PB) { worker(pb.Next) })
	}
	b.StopTimer()
	scripts, cmds := commandCounts(b, srv)
	b.ReportMetric((serverCPU(b, srv)-cpu0)*1e6/float64(scripts), "redis-cpu-µs/call")
	b.ReportMetric(float64(cmds)/float64(scripts), "redis-cmds/call")
}

func benchSettleCalls(b *testing.B, aof bool) {
	srv, l := benchDay(b, aof)
	rdb := srv.Client()
	now := t0.Add(12 * time.Hour)
	for s := range 8 {
		k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: s}
		r := lease.GrantRequest{Shard: k, LeaseID: "held-1", Holder: "other", Want: 1000, Expiry: now.Add(time.Hour), Now: now,
			Pace: lease.Pace{Now: ppb / 2, Cap: ppb/2 + ppb/288}, Grace: 5 * time.Second, DayStart: t0}
		if _, err := l.Grant(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, srv)
	b.ResetTimer()
	for i := range b.N {
		k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: i % 8}
		if _, err := l.Settle(ctx, k, now.Add(time.Duration(i)*time.Millisecond), 5*time.Second, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	scripts, cmds := commandCounts(b, srv)
	b.ReportMetric((serverCPU(b, srv)-cpu0)*1e6/float64(scripts), "redis-cpu-µs/call")
	b.ReportMetric(float64(cmds)/float64(scripts), "redis-cmds/call")
}

// commandCounts is how many scripts (EVALSHA, EVAL, FCALL) Redis ran since the last CONFIG
// RESETSTAT, and how many commands they ran (INFO commandstats, less the
// benchmark's own INFO and CONFIG).
func commandCounts(b *testing.B, srv *redistest.Server) (scripts, cmds int64) {
	b.Helper()
	info, err := srv.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch {
		case name == "evalsha" || name == "eval" || name == "fcall":
			scripts += n
		case name == "info" || name == "hello" || strings.HasPrefix(name, "config") || strings.HasPrefix(name, "script") || strings.HasPrefix(name, "function") || name == "ping":
		default:
			cmds += n
		}
	}
	if scripts == 0 {
		b.Fatal("no script ran")
	}
	return scripts, cmds
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
