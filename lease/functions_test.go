package lease_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// The ledger's scripts are the functions of one library (lease/functions.go).
// A master that lacks it — restarted without persistence, restored from a
// backup taken before it was loaded, a replica that took over without it,
// a master added to a Cluster — is given it by the first call that finds it
// missing, and that call is answered. Each test makes one of those masters
// for real, checks that it lacks the library, and runs the ledger on it.

// libraries lists the pacer libraries a node holds (FUNCTION LIST).
func libraries(t *testing.T, c *redis.Client) []string {
	t.Helper()
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range libs {
		if strings.HasPrefix(l.Name, "pacer_") {
			names = append(names, l.Name)
		}
	}
	return names
}

// mustGrant grants want micros on k at noon and fails the test unless the
// grant is whole.
func mustGrant(t *testing.T, l *lease.Ledger, k lease.ShardKey, id string, want int64) {
	t.Helper()
	now := t0.Add(12 * time.Hour)
	g, err := l.Grant(ctx, grantReq(id, k, want, now, ppb/2))
	if err != nil || g.Granted != want {
		t.Fatalf("grant %s on %s: %+v, %v; want %d granted", id, k, g, err, want)
	}
}

func TestFunctionsReloadAfterARestartWithoutPersistence(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{})
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	c := campaign("c", 8_000_000, 2)
	mustOpen(t, l, c, "2026-11-21")
	mustGrant(t, l, shardKey("c", "2026-11-21", 0), "a", 1000)
	if got := libraries(t, srv.Client()); len(got) != 1 {
		t.Fatalf("libraries after the first calls: %v, want one", got)
	}
	srv.Restart()
	if got := libraries(t, srv.Client()); len(got) != 0 {
		t.Fatalf("libraries after a restart without persistence: %v, want none", got)
	}
	mustOpen(t, l, c, "2026-11-21") // the data went with it
	mustGrant(t, l, shardKey("c", "2026-11-21", 1), "b", 1000)
	if got := libraries(t, srv.Client()); len(got) != 1 {
		t.Fatalf("libraries after the calls: %v, want one", got)
	}
	mustBalance(t, l, "c", "2026-11-21")
}

// A backup of the AOF taken before the library was loaded (the campaign
// stored, the day not opened) is restored: the ledger opens the day and
// grants on it.
func TestFunctionsReloadAfterARestoredBackup(t *testing.T) {
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	c := campaign("c", 8_000_000, 2)
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	aof := filepath.Join(filepath.Dir(srv.Socket), "appendonlydir")
	backup := filepath.Join(t.TempDir(), "appendonlydir")
	copyFiles(t, aof, backup)
	mustOpen(t, l, c, "2026-11-21")
	mustGrant(t, l, shardKey("c", "2026-11-21", 0), "a", 1000)
	if got := libraries(t, srv.Client()); len(got) != 1 {
		t.Fatalf("libraries after the first calls: %v, want one", got)
	}
	srv.Kill()
	if err := os.RemoveAll(aof); err != nil {
		t.Fatal(err)
	}
	copyFiles(t, backup, aof)
	srv.Restart()
	if got := libraries(t, srv.Client()); len(got) != 0 {
		t.Fatalf("libraries after the restore: %v, want none", got)
	}
	if _, err := l.OpenDay(ctx, c, "2026-11-21", t0, t0); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, l, shardKey("c", "2026-11-21", 0), "b", 1000)
	if got := libraries(t, srv.Client()); len(got) != 1 {
		t.Fatalf("libraries after the calls: %v, want one", got)
	}
	mustBalance(t, l, "c", "2026-11-21")
}

// copyFiles copies the regular files of directory src into dst (created).
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil || len(entries) == 0 {
		t.Fatalf("%s: %d files, %v: no AOF to copy", src, len(entries), err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Under replicas:N a call and its WAIT share a pipeline, and so do the
// library's load and the call sent again: the first call on a new master,
// and one after the library was flushed (FUNCTION FLUSH reaches the
// replica too), are answered and acknowledged.
func TestFunctionsReloadUnderTheReplicasPolicy(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	redistest.StartWith(t, redisproc.Options{ReplicaOf: master.Addr})
	mc := master.Client()
	waitReplicas(t, mc, 1)
	l := lease.New(mc, lease.Config{Retention: 100 * 365 * 24 * time.Hour, Durability: mustPolicy(t, "replicas:1")}, nil)
	c := campaign("c", 8_000_000, 2)
	mustOpen(t, l, c, "2026-11-21")
	mustGrant(t, l, shardKey("c", "2026-11-21", 0), "a", 1000)
	if err := mc.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, l, shardKey("c", "2026-11-21", 1), "b", 1000)
	if got := libraries(t, mc); len(got) != 1 {
		t.Fatalf("libraries after the calls: %v, want one", got)
	}
	mustBalance(t, l, "c", "2026-11-21")
}

// A replica that lacks the library (flushed on it alone, as if it was
// promoted before the library reached it) takes over its master by CLUSTER
// FAILOVER; the ledger's next calls on that master's shards are answered.
func TestFunctionsReloadAfterAClusterFailover(t *testing.T) {
	cl, cc, l := clusterDay(t, 1)
	k := shardKey("c", "2026-11-21", 0)
	mustGrant(t, l, k, "a", 1000)
	master := serverFor(t, cl.Nodes, cc, k)
	replica := cl.ReplicaOf(master)
	if replica == nil {
		t.Fatalf("no replica of %s", master.Addr)
	}
	rc := replica.Client()
	waitFor(t, "the replica to have the library", func() bool { return len(libraries(t, rc)) == 1 })
	for _, cmd := range [][]any{{"config", "set", "replica-read-only", "no"}, {"function", "flush"}, {"config", "set", "replica-read-only", "yes"}} {
		if err := rc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v on the replica: %v", cmd, err)
		}
	}
	if got := libraries(t, rc); len(got) != 0 {
		t.Fatalf("the replica's libraries: %v, want none", got)
	}
	// A manual failover gives up silently when the replica has not caught
	// up with its master within Redis's own 5 s (a loaded machine): ask
	// again every 10 s until it takes over.
	var asked time.Time
	waitFor(t, "the replica to take over", func() bool {
		if time.Since(asked) >= 10*time.Second && cl.Role(replica) != "master" {
			if err := rc.Do(ctx, "cluster", "failover").Err(); err != nil {
				t.Fatal(err)
			}
			asked = time.Now()
		}
		return cl.Role(replica) == "master" && cl.Role(master) == "slave"
	})
	cl.WaitOK(30 * time.Second)
	mustGrant(t, l, k, "b", 1000)
	if got := libraries(t, rc); len(got) != 1 {
		t.Fatalf("the new master's libraries after the call: %v, want one", got)
	}
	mustBalance(t, l, "c", "2026-11-21")
}

// A master joins the Cluster (CLUSTER MEET, as an orchestrator adds one;
// redis-cli --cluster add-node would copy the functions to it) and takes
// slots with their keys (redis-cli --cluster rebalance); the ledger's
// calls on the shards it took are answered. The ledger's client still has
// the slot map from before the rebalance, and re-reading it is slowed
// (slowSlotMap), so its first calls on a moved shard follow a MOVED to the
// new master while the map still names the old one: the load must wait
// for the map, not land on the old master again.
func TestFunctionsReloadOnANewClusterMaster(t *testing.T) {
	cl, _, _ := clusterDay(t, 0)
	slow := &slowSlotMap{delay: 600 * time.Millisecond}
	sc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Seed()}, ContextTimeoutEnabled: true, MaxRetries: -1,
		NewClient: func(opt *redis.Options) *redis.Client {
			c := redis.NewClient(opt)
			c.AddHook(slow)
			return c
		}})
	t.Cleanup(func() { sc.Close() })
	l := lease.New(sc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	if err := sc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	bus, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	added := redistest.StartWith(t, redisproc.Options{Persistent: true, TCP: true, Extra: []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus),
		"--cluster-node-timeout", "1000",
	}})
	meet(t, added, cl.Nodes[0])
	cl.Nodes = append(cl.Nodes, added)
	cl.WaitOK(30 * time.Second)
	redisCLI(t, "--cluster", "rebalance", cl.Seed(), "--cluster-use-empty-masters", "--cluster-yes")
	cl.WaitOK(30 * time.Second)
	if got := libraries(t, added.Client()); len(got) != 0 {
		t.Fatalf("the new master's libraries: %v, want none", got)
	}
	slow.on.Store(true)
	fresh := cl.Client()
	moved := 0
	for s := range 8 {
		k := shardKey("c", "2026-11-21", s)
		mustGrant(t, l, k, "a"+strconv.Itoa(s), 1000)
		if serverFor(t, cl.Nodes, fresh, k) == added {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no shard moved to the new master; the test wants one")
	}
	if got := libraries(t, added.Client()); len(got) != 1 {
		t.Fatalf("the new master's libraries after the calls: %v, want one", got)
	}
	mustBalance(t, l, "c", "2026-11-21")
}

// slowSlotMap is a go-redis hook that, once on, delays each CLUSTER SLOTS
// (a Cluster client's reload of its slot map) by delay.
type slowSlotMap struct {
	on    atomic.Bool
	delay time.Duration
}

func (*slowSlotMap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowSlotMap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && strings.EqualFold(cmd.FullName(), "cluster slots") {
			time.Sleep(h.delay)
		}
		return next(ctx, cmd)
	}
}

func (*slowSlotMap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// clusterDay is a Cluster of 3 masters with replicas each, and a ledger
// over it with campaign c's 8 shards of 2026-11-21 open.
func clusterDay(t *testing.T, replicas int) (*redistest.Cluster, *redis.ClusterClient, *lease.Ledger) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, replicas)
	cc := cl.Client()
	l := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	mustOpen(t, l, campaign("c", 8_000_000, 8), "2026-11-21")
	return cl, cc, l
}

// meet joins node to the Cluster of seed (CLUSTER MEET with seed's bus port).
func meet(t *testing.T, node, seed *redistest.Server) {
	t.Helper()
	nodes, err := seed.Client().ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "myself") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], ",")
		hostPort, bus, _ := strings.Cut(addr, "@")
		host, port, _ := strings.Cut(hostPort, ":")
		if err := node.Client().Do(ctx, "cluster", "meet", host, port, bus).Err(); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("CLUSTER NODES of the seed names no myself:\n%s", nodes)
}

// serverFor is the node that is k's master now.
func serverFor(t *testing.T, nodes []*redistest.Server, cc *redis.ClusterClient, k lease.ShardKey) *redistest.Server {
	t.Helper()
	m, err := cc.MasterForKey(ctx, k.RedisKeys()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Addr == m.Options().Addr {
			return n
		}
	}
	t.Fatalf("no node at %s", m.Options().Addr)
	return nil
}

func redisCLI(t *testing.T, args ...string) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found: install it with `sudo apt-get install redis-tools` (or `make deps`)")
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(cctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
}

// waitFor polls cond for up to 30 s (what a Cluster's failover can take
// at a high load average).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a loaded machine (load 20) too
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
