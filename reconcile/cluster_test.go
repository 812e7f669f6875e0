package reconcile_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/redis/go-redis/v9"
)

// On a Redis Cluster the indexes are one key per slot, and 64 anchors say
// which slots have entries (lease/index.go). A step at noon with nothing to
// do reads the 64 anchors, reanchors a rotating 55 slots (each slot once per
// sweep period at the defaults) and sweeps ⌈n/300⌉ campaigns (11 commands
// a campaign of 8 shards): about 130 commands at 10 or 300 campaigns, about
// 500 at 10,000, not 2 × 16,384 index reads. A dead daemon's lease is found
// and settled either way. PACER_BENCH_SCALE=1 adds 10,000 campaigns (make
// bench-scale: storing them takes minutes).
func TestClusterIndexReadsScaleWithCampaigns(t *testing.T) {
	sizes := []int{10, 300}
	if os.Getenv("PACER_BENCH_SCALE") != "" {
		sizes = append(sizes, 10_000)
	}
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) { clusterIndexSteps(t, n) })
	}
}

// clusterIndexSteps stores n campaigns on a 3-master Cluster, counts the
// commands of a reconciler's steps at noon with nothing to do (in all, and
// on each master as it counts them), and has it settle a dead lease.
func clusterIndexSteps(t *testing.T, n int) {
	const masters = 3
	cl := redistest.StartCluster(t, masters, 0)
	begin := time.Now()
	fillCampaigns(t, func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Seed()}, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
	}, 0, n, []string{"2026-11-20", day}, []time.Time{midnight.Add(-24 * time.Hour), midnight})
	t.Logf("stored %d campaigns, two days each, in %v", n, time.Since(begin).Round(time.Millisecond))
	client := cl.Client()
	counter := &redistest.Counter{}
	client.AddHook(counter)
	ledger := lease.New(client, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	clock := clocktest.At(midnight.Add(12 * time.Hour))
	rc := reconcile.New(ledger, reconcile.Config{Clock: clock, Grace: 4 * time.Second})
	for range 2 { // the term's full pass (and yesterday's close), then a step
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	sweep := (n + 299) / 300
	most := int64(64 + 55 + sweep*35 + 10) // anchors, rotating reanchors; a swept campaign: 3 reads, 8 surveys, and its days' reads
	for i := range 3 {
		before, cpuBefore := masterCommands(t, cl)
		counter.Reset()
		clock.Add(time.Second)
		start := time.Now()
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		after, cpuAfter := masterCommands(t, cl)
		per, cpu := make([]int64, masters), make([]int64, masters)
		for m := range per {
			per[m] = after[m] - before[m] - 1 // less INFO itself
			cpu[m] = (cpuAfter[m] - cpuBefore[m]) / 1000
		}
		got := counter.N()
		t.Logf("step %d at %d campaigns: %d Redis commands sent, %v processed by master (a script's calls included), Redis CPU %v ms by master (INFO included), %v, load %s",
			i, n, got, per, cpu, took.Round(time.Millisecond), loadAverage())
		if got > most {
			t.Fatalf("step %d: %d Redis commands at %d campaigns, want at most %d", i, got, n, most)
		}
	}
	settleDeadLeaseOnCluster(t, ledger, rc, clock)
}

// settleDeadLeaseOnCluster grants a lease nobody renews and checks that the
// reconciler's next step after its expiry settles it as lost.
func settleDeadLeaseOnCluster(t *testing.T, ledger *lease.Ledger, rc *reconcile.Reconciler, clock *clocktest.Manual) {
	t.Helper()
	now := clock.Now()
	k := lease.ShardKey{Campaign: "c3", Day: day, Shard: 5}
	g, err := ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "dead", Holder: "h", Want: 1_000_000,
		Expiry: now.Add(10 * time.Second), Now: now, Pace: lease.Pace{Now: 500_000_000, Cap: 510_000_000},
		Grace: 4 * time.Second, DayStart: midnight})
	if err != nil || g.Granted == 0 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	clock.Add(15 * time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if sh, err := ledger.ReadShard(ctx, k); err != nil || sh.Leased != 0 || sh.Lost != g.Granted {
		t.Fatalf("the dead daemon's lease is not settled: %+v, %v", sh, err)
	}
}

// masterCommands is each master's count of the commands it processed
// (INFO stats: a script's own calls included) and its CPU time in
// microseconds (INFO cpu: user and system), in the Cluster's node order.
func masterCommands(t *testing.T, cl *redistest.Cluster) (cmds, cpu []int64) {
	t.Helper()
	for _, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := c.Info(ctx, "stats", "cpu").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		var used float64
		for _, l := range strings.Split(info, "\n") {
			l = strings.TrimSpace(l)
			if v, ok := strings.CutPrefix(l, "total_commands_processed:"); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				cmds = append(cmds, x)
			}
			for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if v, ok := strings.CutPrefix(l, f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					used += x
				}
			}
		}
		cpu = append(cpu, int64(used*1e6))
	}
	return cmds, cpu
}

// loadAverage is the machine's 1-minute load average, for the figures' record.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
