package lease

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// BenchmarkLeaseCallPipelined is what a lease call costs Redis when a
// caller sends k of them to a master in one round trip (a pipeline on one
// connection) instead of one at a time: the socket's read and write, and
// the event loop's pass over the connection, are shared by k calls. One op
// is a grant, its renewal and the release on each of k lanes (a lane: its
// own holder on one of the day's 8 shards), the real scripts with demand
// and another holder's lease kept on every shard, as
// BenchmarkLeaseCallRedisCPU's busy cases. 32 calls are in flight whatever
// k is (32/k connections each sending k), so k=1 is the 32-clients/busy
// case and only the round trips a call change. Cases aof (appendfsync
// always, ledger.durability fsync) and none; PACER_LEASE_PACKED=1 turns
// Config.PackedCounters on. redis-cpu-µs/call is the server's user+system
// CPU (INFO cpu) per script call.
func BenchmarkLeaseCallPipelined(b *testing.B) {
	for _, aof := range []bool{true, false} {
		for _, k := range []int{1, 4, 16, 32} {
			name := map[bool]string{true: "aof", false: "none"}[aof] + "/k=" + strconv.Itoa(k)
			b.Run(name, func(b *testing.B) { benchPipelined(b, aof, k) })
		}
	}
}

// pipeLane is one holder's lease calls on one shard.
type pipeLane struct {
	k      ShardKey
	holder string
	known  History
}

func benchPipelined(b *testing.B, aof bool, k int) {
	ctx := context.Background()
	srv := redistest.StartWith(b, redisproc.Options{Persistent: aof})
	rdb := srv.Client()
	l := New(rdb, Config{Retention: 100 * 365 * 24 * time.Hour, PackedCounters: os.Getenv("PACER_LEASE_PACKED") == "1"}, nil)
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const ppb = 1_000_000_000
	c := Campaign{ID: "c", DailyMicros: 86_400_000_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		b.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, "2026-11-21", t0, t0); err != nil {
		b.Fatal(err)
	}
	now := t0.Add(12 * time.Hour)
	req := func(ln *pipeLane, id string, expiry time.Time) GrantRequest {
		if expiry.IsZero() {
			expiry = now.Add(30 * time.Second)
		}
		return GrantRequest{Shard: ln.k, LeaseID: id, Holder: ln.holder, Want: 1000, Expiry: expiry, Now: now,
			Pace:  Pace{Now: ppb / 2, Cap: ppb/2 + ppb/288, Unit: 1000, CatchUpPermille: 1500},
			Grace: 5 * time.Second, DayStart: t0, Known: ln.known, Demand: 1000, DemandTTL: time.Minute}
	}
	for s := range 8 {
		ln := &pipeLane{k: ShardKey{Campaign: "c", Day: "2026-11-21", Shard: s}, holder: "other"}
		if _, err := l.Grant(ctx, req(ln, "held", now.Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
	}
	conns := 32 / k
	lanes := make([][]*pipeLane, conns)
	for g := range lanes {
		for j := range k {
			n := g*k + j
			lanes[g] = append(lanes[g], &pipeLane{k: ShardKey{Campaign: "c", Day: "2026-11-21", Shard: n % 8}, holder: "h" + strconv.Itoa(n)})
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := pipeServerCPU(b, rdb)
	var mu sync.Mutex
	next := 0
	take := func() bool { // b.N ops of k lanes' calls, shared by the connections
		mu.Lock()
		defer mu.Unlock()
		next += k
		return next-k < b.N
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := srv.Client() // a client of its own: one connection, its pipelines in order
			defer conn.Close()
			for i := 0; take(); i++ {
				if err := pipelinedOp(ctx, l, conn, lanes[g], i, req); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	scripts := pipeScripts(b, rdb)
	b.ReportMetric((pipeServerCPU(b, rdb)-cpu0)*1e6/float64(scripts), "redis-cpu-µs/call")
}

// pipelinedOp sends each lane's grant, then its renewal, then its release,
// the k lanes' calls of each kind in one pipeline.
func pipelinedOp(ctx context.Context, l *Ledger, conn *redis.Client, lanes []*pipeLane, i int, req func(*pipeLane, string, time.Time) GrantRequest) error {
	id := func(ln *pipeLane) string { return ln.holder + "-" + strconv.Itoa(i) }
	kinds := []func(redis.Pipeliner, *pipeLane) *redis.Cmd{
		func(p redis.Pipeliner, ln *pipeLane) *redis.Cmd {
			r := req(ln, id(ln), time.Time{})
			return grantScript.send(ctx, p, l.scriptKeys(ln.k), l.packedArg(l.grantArgs(r))...)
		},
		func(p redis.Pipeliner, ln *pipeLane) *redis.Cmd {
			r := req(ln, id(ln)+"r", time.Time{})
			return renewScript.send(ctx, p, l.scriptKeys(ln.k), l.packedArg(append(append([]any{id(ln), 0}, l.grantArgs(r)...), r.Refunded))...)
		},
		func(p redis.Pipeliner, ln *pipeLane) *redis.Cmd {
			r := req(ln, id(ln)+"r", time.Time{})
			return releaseScript.send(ctx, p, l.scriptKeys(ln.k), l.packedArg([]any{id(ln) + "r", 0, r.Now.UnixMilli(), l.cfg.AuditMaxLen, ln.known.Seq, ln.known.Tip, ln.known.Granted, ln.known.Returned, 0})...)
		},
	}
	for _, kind := range kinds {
		p := conn.Pipeline()
		cmds := make([]*redis.Cmd, len(lanes))
		for j, ln := range lanes {
			cmds[j] = kind(p, ln)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		for j, cmd := range cmds {
			res, err := cmd.Int64Slice()
			if err != nil {
				return err
			}
			if res[0] != 0 {
				return fmt.Errorf("lease call refused: status %d", res[0])
			}
			lanes[j].known = History{Seq: res[9], Tip: res[10]}
		}
	}
	return nil
}

func pipeServerCPU(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
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

func pipeScripts(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no script ran")
	return 0
}
