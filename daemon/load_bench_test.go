package daemon_test

import (
	"github.com/pacer/pacer"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// BenchmarkDaemonScale is one daemon's cost per campaign (issue 13): n
// campaigns loaded, a realistic mix of 1% hot (20 SPENDs a tick: busy on
// every host), 20% warm (a SPEND every 30 s on this host: sparse here, on a
// standing lease) and the rest cold (loaded, never used),
// against a real redis-server, the refill loop ticking every 100 ms of an
// injected clock. One op is one simulated second (10 ticks). Reported:
//
//	cmds/campaign-min   Redis commands per campaign per minute, all kinds
//	lease/hot-min       lease scripts (grant, renew, release, open) per hot
//	lease/warm-min      campaign per minute, per warm one
//	other/hot-min       other commands per hot campaign per minute (demand
//	other/warm-min      flushes, bids), per warm one; the change stream
//	                    read, one per daemon, is in cmds/campaign-min only
//	heap-B/campaign     live heap per campaign loaded (after Warm and a GC)
//	cpu-µs/campaign-s   this process's CPU per campaign per simulated second
//	                    (daemon, SPEND calls and the Redis client; not Redis)
//	redis-µs/script     Redis's own time per script call (INFO commandstats
//	                    evalsha usec_per_call: the Lua and the commands it
//	                    runs, not the network I/O)
//
// "idle" is the same n campaigns loaded and none used: what an idle campaign
// costs before CampaignIdle drops it. Setting up 10,000 campaigns takes a
// while, so it runs only with PACER_BENCH_SCALE=1 (make bench-scale).
func BenchmarkDaemonScale(b *testing.B) {
	if os.Getenv("PACER_BENCH_SCALE") == "" {
		b.Skip("set PACER_BENCH_SCALE=1 (make bench-scale)")
	}
	for _, n := range []int{1_000, 10_000} {
		for _, mix := range []string{"mix", "idle"} {
			b.Run(strconv.Itoa(n)+"/"+mix, func(b *testing.B) { benchDaemonScale(b, n, mix) })
		}
	}
}

func benchDaemonScale(b *testing.B, n int, mix string) {
	f := newFixture(b)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c" + strconv.Itoa(i), DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	hot, warm := n/100, n/5
	kinds := &cmdKinds{n: map[string]int64{}, class: func(key string) string {
		// Keys name the campaign as {c<i>/day/shard} or pacer:demand:c<i>:day.
		_, rest, ok := strings.Cut(key, "{c")
		if !ok {
			_, rest, _ = strings.Cut(key, "pacer:demand:c")
		}
		i, _ := strconv.Atoi(strings.FieldsFunc(rest, func(r rune) bool { return r < '0' || r > '9' })[0])
		switch {
		case i < hot:
			return "hot"
		case i < hot+warm:
			return "warm"
		}
		return "cold"
	}}
	c := f.Redis.Client()
	c.AddHook(kinds)
	ledger := lease.New(c, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(ledger, daemon.Config{Holder: "h", Clock: f.Clock, MaxCampaignLoads: 1024})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(ctx) })
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "c" + strconv.Itoa(i)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	d.Warm(ids)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	tick := func(t int) {
		f.Clock.Add(100 * time.Millisecond)
		d.Step(ctx)
		if mix == "idle" {
			return
		}
		for i := range hot {
			for range 20 {
				d.Spend(pacer.CampaignID(ids[i]), 1000, "")
			}
		}
		for i := hot; i < hot+warm; i++ {
			if (i+t)%300 == 0 {
				d.Spend(pacer.CampaignID(ids[i]), 1000, "")
			}
		}
	}
	// One minute to settle: first leases, the first flushes.
	for t := range 600 {
		tick(t)
	}
	kinds.take()
	cpu0 := processCPU()
	if err := f.Redis.Client().ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		for t := range 10 {
			tick(i*10 + t)
		}
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	k := kinds.take()
	var all int64
	for kind, v := range k {
		if !strings.Contains(kind, " ") && !strings.Contains(kind, ":") {
			all += v
		}
	}
	minutes := float64(b.N) / 60
	b.ReportMetric(float64(all)/float64(n)/minutes, "cmds/campaign-min")
	if mix == "mix" {
		for _, class := range []struct {
			name string
			n    int
		}{{"hot", hot}, {"warm", warm}} {
			var other int64
			for kind, v := range k {
				if strings.HasSuffix(kind, ":"+class.name) && !strings.HasPrefix(kind, "lease:") {
					other += v
				}
			}
			b.ReportMetric(float64(k["lease:"+class.name])/float64(class.n)/minutes, "lease/"+class.name+"-min")
			b.ReportMetric(float64(other)/float64(class.n)/minutes, "other/"+class.name+"-min")
		}
	}
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/float64(n), "heap-B/campaign")
	b.ReportMetric(cpu.Seconds()*1e6/float64(n)/float64(b.N), "cpu-µs/campaign-s")
	if us, ok := scriptUsec(b, f); ok {
		b.ReportMetric(us, "redis-µs/script")
	}
	b.Logf("%d campaigns, %s, %d simulated s: commands %v", n, mix, b.N, k)
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scriptUsec is Redis's own time per ledger script (EVALSHA and FCALL)
// since its stats were reset.
func scriptUsec(tb testing.TB, f *fixture) (float64, bool) {
	tb.Helper()
	info, err := f.Redis.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var calls, usec float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			rest, ok = strings.CutPrefix(line, "cmdstat_fcall:")
		}
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	if calls == 0 {
		return 0, false
	}
	return usec / calls, true
}
