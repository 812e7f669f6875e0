package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redisretry"
	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster for one test: redis-server processes on
// loopback ports, joined by `redis-cli --cluster create`.
type Cluster struct {
	// Nodes are every server, masters and replicas, in creation order.
	Nodes   []*Server
	tb      testing.TB
	clients map[*Server]*redis.Client
}

// node returns a client of one node, kept for the test.
func (c *Cluster) node(n *Server) *redis.Client {
	if c.clients[n] == nil {
		c.clients[n] = n.Client()
	}
	return c.clients[n]
}

// StartCluster starts masters × (1 + replicas) redis-servers with
// cluster-enabled yes (AOF with fsync always; with replicas, a node timeout
// of one second so that a replica takes over a killed master within
// seconds; without, of a minute, since nothing can take over and a loaded
// machine's late cluster-bus pings would otherwise mark a master failed
// and the Cluster down), creates
// the Cluster with redis-cli (each master with its replicas), and returns
// it once every node reports cluster_state:ok and every replica's link is
// up. A missing redis-cli fails the test with a message saying how to get
// it.
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatal("redis-cli not found: install it with `sudo apt-get install redis-tools` (or `make deps`)")
	}
	c := &Cluster{tb: tb, clients: map[*Server]*redis.Client{}}
	var addrs []string
	timeout := "1000"
	if replicas == 0 {
		timeout = "60000"
	}
	for range masters * (1 + replicas) {
		bus, err := redisproc.FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		n := StartWith(tb, redisproc.Options{Persistent: true, TCP: true, Extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", timeout, "--repl-diskless-sync-delay", "0",
		}})
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(30 * time.Second)
	return c
}

// Seed returns one node's address, as a deployment would give it.
func (c *Cluster) Seed() string { return c.Nodes[0].Addr }

// Client returns a Cluster client from one seed, as the daemon's
// (ContextTimeoutEnabled, no retries but the read-only ones), closed at
// cleanup.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.Seed()}, ContextTimeoutEnabled: true, MaxRetries: -1})
	cc.AddHook(redisretry.Reads{})
	c.tb.Cleanup(func() { cc.Close() })
	return cc
}

// Role returns a node's role as it says ("master" or "slave"), or "" if it
// does not answer.
func (c *Cluster) Role(n *Server) string {
	info, err := c.node(n).Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(info, "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(l), "role:"); ok {
			return r
		}
	}
	return ""
}

// ReplicaOf returns the live replica of master, or nil.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	_, port, _ := strings.Cut(master.Addr, ":")
	for _, n := range c.Nodes {
		if n == master {
			continue
		}
		info, err := c.node(n).Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_port:"+port+"\r") {
			return n
		}
	}
	return nil
}

// WaitOK waits until every live node reports cluster_state:ok and sees
// every slot served, knows every other live node by its id (a node just
// met is known to the others only after gossip, and redis-cli's slot
// moves to it fail with "I don't know about node" until then), and every
// replica's link to its master is up.
func (c *Cluster) WaitOK(within time.Duration) {
	c.tb.Helper()
	deadline := time.Now().Add(within)
	for {
		err := c.ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("cluster not ok within %v: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) ok() error {
	ctx := context.Background()
	ids := map[*Server]string{}
	for _, n := range c.Nodes {
		if n.Dead() {
			continue
		}
		id, err := c.node(n).Do(ctx, "cluster", "myid").Text()
		if err != nil {
			return err
		}
		ids[n] = id
	}
	for _, n := range c.Nodes {
		if n.Dead() {
			continue
		}
		cl := c.node(n)
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: %s", n.Addr, strings.TrimSpace(strings.SplitN(info, "\n", 2)[0]))
		}
		if err := knowsAll(ctx, cl, n, ids); err != nil {
			return err
		}
		repl, err := cl.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica link down", n.Addr)
		}
	}
	return nil
}

// knowsAll says whether n's CLUSTER NODES lists every id in ids past its
// handshake.
func knowsAll(ctx context.Context, cl *redis.Client, n *Server, ids map[*Server]string) error {
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && !strings.Contains(f[2], "handshake") {
			known[f[0]] = true
		}
	}
	for m, id := range ids {
		if !known[id] {
			return fmt.Errorf("%s does not know %s (%s) yet", n.Addr, m.Addr, id)
		}
	}
	return nil
}
