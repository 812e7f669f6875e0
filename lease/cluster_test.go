package lease_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// startCluster starts a Redis Cluster of two masters (slots split in half),
// each run as opts says, and returns them once the cluster is ok.
func startCluster(t *testing.T, opts ...redisproc.Options) []*redistest.Server {
	t.Helper()
	var nodes []*redistest.Server
	var buses []int
	for _, o := range opts {
		bus, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		o.TCP = true
		o.Extra = append(o.Extra, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus))
		nodes = append(nodes, redistest.StartWith(t, o))
		buses = append(buses, bus)
	}
	for i, n := range nodes {
		c := n.Client()
		lo, hi := i*16384/len(nodes), (i+1)*16384/len(nodes)-1
		if err := c.Do(ctx, "cluster", "addslotsrange", lo, hi).Err(); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			host, port, _ := strings.Cut(nodes[0].Addr, ":")
			// The bus port is not port+10000 (cluster-port): say it.
			if err := c.Do(ctx, "cluster", "meet", host, port, buses[0]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range nodes {
		for {
			s, err := n.Client().ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(s, "cluster_state:ok") && strings.Contains(s, "cluster_known_nodes:"+strconv.Itoa(len(nodes))) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ok within 20s: %v\n%s", err, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nodes
}

func TestClusterDurabilityEveryMaster(t *testing.T) {
	nodes := startCluster(t, redisproc.Options{Persistent: true}, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}, ContextTimeoutEnabled: true})
	defer cc.Close()

	// The second master runs everysec: refused, naming it.
	rep, err := lease.CheckDurability(ctx, cc, lease.Durability{}, nil)
	if !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "redis at "+nodes[1].Addr+" runs appendfsync everysec") ||
		strings.Contains(err.Error(), nodes[0].Addr) || len(rep.Nodes) != 2 {
		t.Fatalf("check: %+v, %v", rep, err)
	}
	if err := nodes[1].Client().ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.CheckDurability(ctx, cc, lease.Durability{}, nil); err != nil {
		t.Fatalf("both masters always: %v", err)
	}

	// replicas:1 WAITs on the master of the script's key, which has none.
	pol := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: 50 * time.Millisecond}
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	for _, key := range []string{"{a}k", "{b}k", "{c}k", "{d}k"} {
		master, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		err = pol.Run(ctx, cc, incr, []string{key}).Err()
		var nd *lease.NotDurableError
		if !errors.As(err, &nd) || nd.Addr != master.Options().Addr || nd.Reply != int64(1) {
			t.Fatalf("%s: %v, want NotDurable from %s", key, err, master.Options().Addr)
		}
		if v, err := cc.Get(ctx, key).Int64(); err != nil || v != 1 {
			t.Fatalf("%s = %d, %v: the script did not run once on its master", key, v, err)
		}
	}

	// The clock is measured on every master.
	o, err := lease.MeasureClockOffset(ctx, cc, func() time.Time { return time.Now().Add(time.Minute) })
	if err != nil || o.Offset < 59*time.Second || (o.Addr != nodes[0].Addr && o.Addr != nodes[1].Addr) {
		t.Fatalf("cluster clock offset %+v, %v", o, err)
	}
}

// On a Cluster the reconciler's indexes are kept per slot, each in its
// shard's slot (a script touches one slot): grants on shards spread over
// both masters are all found due once expired, settled, and leave the
// index; a drained shard is found low.
func TestClusterIndexesPerSlot(t *testing.T) {
	nodes := startCluster(t, redisproc.Options{}, redisproc.Options{})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}, ContextTimeoutEnabled: true})
	defer cc.Close()
	l := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	c, err := l.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: 8_000_000, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	if _, err := l.OpenDay(ctx, c, "2026-11-21", day, day); err != nil {
		t.Fatal(err)
	}
	now := day.Add(23 * time.Hour)
	masters := map[string]bool{}
	for i := range 8 {
		k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: i}
		m, err := cc.MasterForKey(ctx, k.RedisKeys()[0])
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
		want := int64(100_000)
		if i == 5 {
			want = 1_000_000 // all of it: shard 5 runs low
		}
		g, err := l.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "l" + strconv.Itoa(i), Holder: "h", Want: want,
			Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
			Grace: 5 * time.Second, DayStart: day})
		if err != nil || g.Granted == 0 {
			t.Fatalf("grant on %s: %+v, %v", k, g, err)
		}
	}
	if len(masters) != 2 {
		t.Fatalf("the shards sit on %d masters; the test wants both", len(masters))
	}
	due, err := l.DueShards(ctx, now.Add(30*time.Second), 100)
	if err != nil || len(due) != 0 {
		t.Fatalf("due before expiry: %v, %v", due, err)
	}
	low, err := l.LowShards(ctx, 100)
	if err != nil || len(low) != 1 || low[0].Shard.Shard != 5 {
		t.Fatalf("low shards %+v, %v: want shard 5", low, err)
	}
	later := now.Add(40 * time.Second)
	due, err = l.DueShards(ctx, later.Add(-5*time.Second), 100)
	if err != nil || len(due) != 8 {
		t.Fatalf("due after expiry: %d shards, %v; want 8", len(due), err)
	}
	for _, e := range due {
		if s, err := l.Settle(ctx, e.Shard, later, 5*time.Second, 1); err != nil || s.Count != 1 {
			t.Fatalf("settle %s: %+v, %v", e.Shard, s, err)
		}
	}
	if due, err = l.DueShards(ctx, later, 100); err != nil || len(due) != 0 {
		t.Fatalf("still due after settling: %v, %v", due, err)
	}
	if err := l.Unindex(ctx, low); err != nil {
		t.Fatal(err)
	}
	if low, err = l.LowShards(ctx, 100); err != nil || len(low) != 0 {
		t.Fatalf("still low after clearing: %v, %v", low, err)
	}
}

// On a Cluster a demand flush writes the demand hash and the ring of
// recent minutes in one script: the ring's key hashes to the demand
// hash's slot, for campaigns on either master.
func TestClusterDemandRingSharesTheDemandSlot(t *testing.T) {
	nodes := startCluster(t, redisproc.Options{}, redisproc.Options{})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}, ContextTimeoutEnabled: true})
	defer cc.Close()
	l := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	const m0 = 29_000_000
	masters := map[string]bool{}
	for i := 0; i < 64 && len(masters) < 2; i++ {
		id := strconv.FormatInt(int64(i+1)*2654435761, 36) // ids of varied characters
		dk, rk := lease.DemandKey(id, day), lease.RecentDemandKey(id, day)
		ds, err1 := cc.ClusterKeySlot(ctx, dk).Result()
		rs, err2 := cc.ClusterKeySlot(ctx, rk).Result()
		if err1 != nil || err2 != nil || ds != rs {
			t.Fatalf("%s in slot %d, %s in %d (%v, %v)", dk, ds, rk, rs, err1, err2)
		}
		m, err := cc.MasterForKey(ctx, dk)
		if err != nil {
			t.Fatal(err)
		}
		if masters[m.Options().Addr] {
			continue
		}
		masters[m.Options().Addr] = true
		for k := range int64(6) {
			if _, err := l.AddDemand(ctx, id, day, t0, lease.Recent{Minute: m0 + k}, lease.Demand{Slot: 1, Requests: 1, MicrosAsked: 10 + k}); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		got, err := l.AddDemand(ctx, id, day, t0, lease.Recent{Minute: m0 + 6, From: m0 + 1, To: m0 + 5}, lease.Demand{Slot: 1, Requests: 1})
		if err != nil || got.Span != 11+12+13+14+15 || got.SpanMinutes != 5 {
			t.Fatalf("%s: span %+v, %v; want 65 micros in 5 minutes", id, got, err)
		}
	}
	if len(masters) != 2 {
		t.Errorf("64 campaigns' demand hashes fell on %d masters, want both", len(masters))
	}
}
