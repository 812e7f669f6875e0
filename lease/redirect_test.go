package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisretry"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// Under replicas:N a script and its WAIT go to the master the Cluster
// client's slot map names, on one connection; when the slot has moved, the
// ledger follows Redis's MOVED, ASK and TRYAGAIN answers itself
// (lease/redirect.go). Each test moves a slot for real, as redis-cli
// --cluster reshard does, under a client whose slot map is frozen as it
// was read first (frozenSlots): stale for certain, however long the test
// takes, and re-read stale too, as from a node that has not learned of the
// move yet.

// replicasLedger is a ledger under replicas:1 over a Cluster of 3 masters
// with a replica each, through a client with a frozen slot map, with
// campaign c's 8 shards of 2026-11-21 open.
func replicasLedger(t *testing.T) (*redistest.Cluster, *frozenSlots, *lease.Ledger) {
	t.Helper()
	return replicasLedgerWith(t, nil)
}

// replicasLedgerWith is replicasLedger whose Cluster client makes its node
// clients with newClient (nil: go-redis's own).
func replicasLedgerWith(t *testing.T, newClient func(*redis.Options) *redis.Client) (*redistest.Cluster, *frozenSlots, *lease.Ledger) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 1)
	fs := &frozenSlots{seed: cl.Nodes[0].Client()}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Seed()}, ContextTimeoutEnabled: true, MaxRetries: -1,
		ClusterSlots: fs.load, NewClient: newClient})
	cc.AddHook(redisretry.Reads{})
	t.Cleanup(func() { cc.Close() })
	fs.cc = cc
	// WAIT returns once the replica acknowledges; its timeout matters only
	// when it does not, and a loaded machine may take seconds.
	pol := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: 30 * time.Second}
	l := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour, Durability: pol}, nil)
	mustOpen(t, l, campaign("c", 8_000_000, 8), "2026-11-21")
	return cl, fs, l
}

// frozenSlots is a Cluster client's ClusterSlots: the slot map as the seed
// first said, whenever the client reads it; loads counts the reads.
type frozenSlots struct {
	seed  *redis.Client
	cc    *redis.ClusterClient
	mu    sync.Mutex
	slots []redis.ClusterSlot
	loads int
	gate  chan struct{} // non-nil: a read waits until it is closed
}

func (f *frozenSlots) load(ctx context.Context) ([]redis.ClusterSlot, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads++
	if f.slots == nil {
		s, err := f.seed.ClusterSlots(ctx).Result()
		if err != nil {
			return nil, err
		}
		f.slots = s
	}
	return f.slots, nil
}

func (f *frozenSlots) reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads
}

// A shard's slot moves to another master. While the slot migrates (its
// keys on the new master, the old one still its owner), a grant is sent to
// the old master, which answers ASK; the new master, asked, answers
// TRYAGAIN (it lacks some of the script's keys, which no script has
// created yet): nothing runs, and after maxRedirects answers the grant
// fails with ErrRedirected. Once the slot is the new master's, the old one
// answers MOVED, the client re-reads its map (still stale) and sends the
// same grant to the master MOVED names, which runs it. Conservation holds
// and the lease is charged once.
func TestClusterLedgerFollowsAMovedSlot(t *testing.T) {
	cl, fs, l := replicasLedger(t)
	k := shardKey("c", "2026-11-21", 0)
	mustGrant(t, l, k, "a", 1000)
	src := serverFor(t, cl.Nodes, fs.cc, k)
	dst := otherMaster(t, cl, src)
	finish := migrateSlot(t, cl, lease.Slot(k.String()), src, dst)

	now := t0.Add(12 * time.Hour)
	_, err := l.Grant(ctx, grantReq("b", k, 1000, now, ppb/2))
	if !errors.Is(err, lease.ErrRedirected) || !strings.Contains(err.Error(), "ASK TRYAGAIN ASK") {
		t.Fatalf("grant while the slot migrates: %v; want ErrRedirected after ASK and TRYAGAIN", err)
	}
	if _, found, err := l.LeaseOf(ctx, k, "b"); err != nil || found {
		t.Fatalf("lease b after the refused grant: found %v, %v; want none", found, err)
	}

	finish()
	if serverFor(t, cl.Nodes, fs.cc, k) != src {
		t.Fatal("the client's slot map names the new master; the test wants it stale")
	}
	reads := fs.reads()
	mustGrant(t, l, k, "b", 1000)
	if fs.reads() == reads {
		t.Error("the client did not re-read its slot map after a MOVED")
	}
	total := mustBalance(t, l, "c", "2026-11-21")
	if total.Leased != 2000 {
		t.Fatalf("leased %d after grants a and b of 1000, want 2000", total.Leased)
	}
	// The grant sent again under its id changes nothing.
	mustGrant(t, l, k, "b", 1000)
	if total = mustBalance(t, l, "c", "2026-11-21"); total.Leased != 2000 {
		t.Fatalf("leased %d after grant b again, want 2000", total.Leased)
	}
	if lr, found, err := l.LeaseOf(ctx, k, "b"); err != nil || !found || lr.Amount != 1000 {
		t.Fatalf("lease b: %+v, %v, %v; want 1000 micros", lr, found, err)
	}
}

// After a failover every call in flight to the old master is answered
// MOVED at once, and they share one re-read of the slot map where each did
// its own CLUSTER SLOTS. Sixteen grants on a moved shard are sent together
// under a stale map; every read of the map waits until all sixteen have
// been answered MOVED, so the first is certainly in flight as the last
// come. The grants all land, once each.
func TestClusterMovedCallsShareASlotMapRead(t *testing.T) {
	const n = 16
	var moved atomic.Int64
	allMoved := make(chan struct{})
	count := movedCounter(func() {
		if moved.Add(1) == n {
			close(allMoved)
		}
	})
	cl, fs, l := replicasLedgerWith(t, func(opt *redis.Options) *redis.Client {
		c := redis.NewClient(opt)
		c.AddHook(count)
		return c
	})
	k := shardKey("c", "2026-11-21", 0)
	mustGrant(t, l, k, "a", 1000)
	src := serverFor(t, cl.Nodes, fs.cc, k)
	migrateSlot(t, cl, lease.Slot(k.String()), src, otherMaster(t, cl, src))()

	fs.mu.Lock()
	fs.gate = allMoved
	reads := fs.loads
	fs.mu.Unlock()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			g, err := l.Grant(ctx, grantReq(fmt.Sprintf("g%02d", i), k, 1000, t0.Add(12*time.Hour), ppb/2))
			if err == nil && g.Granted != 1000 {
				err = fmt.Errorf("granted %d of 1000", g.Granted)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a grant after the move: %v", err)
		}
	}
	// One read for the wave, and at most one of go-redis's own (a map over
	// 10 s old is re-read in the background when a call looks it up).
	if got := fs.reads() - reads; got > 2 {
		t.Errorf("%d calls answered MOVED at once read the slot map %d times; want them to share a read", n, got)
	}
	if total := mustBalance(t, l, "c", "2026-11-21"); total.Leased != 1000*(n+1) {
		t.Fatalf("leased %d after %d grants of 1000, want %d", total.Leased, n+1, 1000*(n+1))
	}
}

// movedCounter is a node client's hook that calls its func for each
// command of a pipeline answered MOVED.
type movedCounter func()

func (movedCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (movedCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (m movedCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Err() != nil && strings.HasPrefix(c.Err().Error(), "MOVED ") {
				m()
			}
		}
		return err
	}
}

// A master's watermark (one key: the script has all its keys where it
// runs) is in a slot that migrates: the old master answers ASK, and the
// new one, which has never run the watermark script, is sent ASKING before
// the script's load (EVAL) and runs it. The watermark advances on the new
// master, once.
func TestClusterLedgerFollowsAnAsk(t *testing.T) {
	cl, _, l := replicasLedger(t)
	ms, err := l.Masters(ctx)
	if err != nil || len(ms) != 3 {
		t.Fatalf("masters %+v, %v", ms, err)
	}
	m := ms[0]
	w, err := l.AdvanceWatermark(ctx, m, lease.Watermark{}, false, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var src *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr == m.Addr {
			src = n
		}
	}
	dst := otherMaster(t, cl, src)
	dc := dst.Client()
	if watermarkScriptCached(t, dc) {
		t.Fatal("the new master has run the watermark script; the test wants it without")
	}
	finish := migrateSlot(t, cl, m.Slots[0][0], src, dst)

	got, err := l.AdvanceWatermark(ctx, m, w, true, 2, 1)
	if err != nil || got.Counter != 2 || got.Epoch != w.Epoch {
		t.Fatalf("advance while the slot migrates: %v, %v; want counter 2 of epoch %x", got, err, w.Epoch)
	}
	finish()
	keys, err := dc.Keys(ctx, "pacer:watermark*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("watermarks on the new master: %v, %v; want the moved one", keys, err)
	}
	if c, err := dc.HGet(ctx, keys[0], "counter").Int64(); err != nil || c != 2 {
		t.Fatalf("the moved watermark's counter: %d, %v; want 2", c, err)
	}
	if !watermarkScriptCached(t, dc) {
		t.Fatal("the new master did not load the watermark script")
	}
}

// watermarkScriptCached reports whether node c has the watermark's EVAL
// script in its cache.
func watermarkScriptCached(t *testing.T, c *redis.Client) bool {
	t.Helper()
	src, err := os.ReadFile("lua/watermark.lua")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := c.ScriptExists(ctx, redis.NewScript(string(src)).Hash()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ok[0]
}

// otherMaster is a live master of cl other than n.
func otherMaster(t *testing.T, cl *redistest.Cluster, n *redistest.Server) *redistest.Server {
	t.Helper()
	for _, o := range cl.Nodes {
		if o != n && !o.Dead() && cl.Role(o) == "master" {
			return o
		}
	}
	t.Fatalf("no master besides %s", n.Addr)
	return nil
}

// migrateSlot moves slot's keys from src to dst as redis-cli --cluster
// reshard does (CLUSTER SETSLOT IMPORTING on dst, MIGRATING on src, then
// MIGRATE of every key), and leaves the slot migrating: src still owns it.
// finish gives it to dst (SETSLOT NODE on every master) and waits until
// every node says so.
func migrateSlot(t *testing.T, cl *redistest.Cluster, slot int, src, dst *redistest.Server) (finish func()) {
	t.Helper()
	clients := map[*redistest.Server]*redis.Client{}
	for _, n := range cl.Nodes {
		clients[n] = n.Client()
	}
	sc, dc := clients[src], clients[dst]
	srcID, err := sc.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dc.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys in slot %d: %v, %v; want some", slot, keys, err)
	}
	host, port, _ := strings.Cut(dst.Addr, ":")
	args := []any{"migrate", host, port, "", 0, 30_000, "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := sc.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("MIGRATE of slot %d: %v", slot, err)
	}
	return func() {
		t.Helper()
		// The new owner first, then the old, then the other masters, as
		// redis-cli does.
		order := []*redistest.Server{dst, src}
		for _, n := range cl.Nodes {
			if n != src && n != dst && cl.Role(n) == "master" {
				order = append(order, n)
			}
		}
		for _, n := range order {
			if err := clients[n].Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "every node to give the slot to its new master", func() bool { return allSay(clients, slot, dst.Addr) })
	}
}

// allSay reports whether every live node's CLUSTER SLOTS gives slot to the
// master at addr.
func allSay(clients map[*redistest.Server]*redis.Client, slot int, addr string) bool {
	for n, c := range clients {
		if n.Dead() {
			continue
		}
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			return false
		}
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End && (len(s.Nodes) == 0 || s.Nodes[0].Addr != addr) {
				return false
			}
		}
	}
	return true
}
