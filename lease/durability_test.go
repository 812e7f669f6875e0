package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

func TestParseDurability(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want lease.Durability
		err  string
	}{
		{in: "", want: lease.Durability{Policy: lease.PolicyFsync}},
		{in: "fsync", want: lease.Durability{Policy: lease.PolicyFsync}},
		{in: "none", want: lease.Durability{Policy: lease.PolicyNone}},
		{in: "replicas:2", want: lease.Durability{Policy: lease.PolicyReplicas, Replicas: 2}},
		{in: "replicas:0", err: "want replicas:N"},
		{in: "replicas:x", err: "want replicas:N"},
		{in: "always", err: "want fsync, replicas:N or none"},
	} {
		got, err := lease.ParseDurability(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDurability(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseDurability(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.in != "" && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	r1 := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1}
	r2 := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 2}
	fsync := lease.Durability{}
	if !r2.Covers(r1) || r1.Covers(r2) || fsync.Covers(r1) || r1.Covers(fsync) || !fsync.Covers(fsync) {
		t.Error("Covers: replicas:M covers replicas:N for M >= N only; fsync covers only fsync")
	}
}

func mustPolicy(t *testing.T, s string) lease.Durability {
	t.Helper()
	d, err := lease.ParseDurability(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDurabilityFsyncAlwaysAccepted(t *testing.T) {
	srv := redistest.Start(t) // appendonly yes, appendfsync always
	rep, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Nodes) != 1 || rep.Nodes[0].AppendFsync != "always" || rep.Nodes[0].Role != "master" || len(rep.Warnings) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestDurabilityEverysecRefused(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	_, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), nil)
	var de *lease.DurabilityError
	if !errors.As(err, &de) || !errors.Is(err, lease.ErrNotDurable) {
		t.Fatalf("err = %v, want a *DurabilityError", err)
	}
	for _, want := range []string{"redis at " + srv.Socket, "runs appendfsync everysec", "ledger.durability=fsync", "appendfsync always", "CONFIG SET appendfsync always", "replicas:N"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Fixed at runtime, as the message says: accepted.
	if err := srv.Client().ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), nil); err != nil {
		t.Fatalf("after CONFIG SET appendfsync always: %v", err)
	}
}

func TestDurabilityNoAOFRefused(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{})
	_, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), nil)
	if !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "runs appendonly no") || !strings.Contains(err.Error(), "CONFIG SET appendonly yes") {
		t.Fatalf("err = %v", err)
	}
}

func TestDurabilityNoneAcceptedWithWarning(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{}) // no persistence at all
	rep, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "none"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "overspend") && !strings.Contains(rep.Warnings[0], "more than a budget") {
		t.Fatalf("warnings %q: want one saying what none risks", rep.Warnings)
	}
}

func TestDurabilityConfigDisabled(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, Conf: "rename-command CONFIG \"\"\n"})
	if err := srv.Client().ConfigGet(ctx, "appendfsync").Err(); err == nil {
		t.Fatal("CONFIG still works; the test server is not set up as a managed Redis")
	}
	_, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), nil)
	if !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "refuses CONFIG") || !strings.Contains(err.Error(), "ledger.durability_assume: fsync") {
		t.Fatalf("err = %v: want a refusal naming ledger.durability_assume", err)
	}
	assume := mustPolicy(t, "fsync")
	rep, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), &assume)
	if err != nil {
		t.Fatalf("with durability_assume fsync: %v", err)
	}
	if !rep.Nodes[0].Assumed || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "assumed") {
		t.Fatalf("report %+v: want the node marked assumed, with a warning", rep)
	}
	// An assumption that does not cover the policy is no assumption.
	r1 := mustPolicy(t, "replicas:1")
	if _, err := lease.CheckDurability(ctx, srv.Client(), mustPolicy(t, "fsync"), &r1); !errors.Is(err, lease.ErrNotDurable) {
		t.Fatalf("assume replicas:1 for fsync: %v, want refused", err)
	}
}

func TestDurabilityConfigDisabledAOFOff(t *testing.T) {
	// Even an operator's assumption cannot overrule what INFO shows.
	srv := redistest.StartWith(t, redisproc.Options{Conf: "rename-command CONFIG \"\"\n"})
	assume := mustPolicy(t, "fsync")
	_, err := lease.CheckDurability(ctx, srv.Client(), assume, &assume)
	if !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "aof_enabled:0") {
		t.Fatalf("err = %v", err)
	}
}

func TestDurabilityReplicaIsRefused(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{Persistent: true, TCP: true})
	replica := redistest.StartWith(t, redisproc.Options{Persistent: true, ReplicaOf: master.Addr})
	_, err := lease.CheckDurability(ctx, replica.Client(), mustPolicy(t, "fsync"), nil)
	if !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "is a replica") {
		t.Fatalf("err = %v", err)
	}
}

// waitReplicas waits (bounded) until the master lists n online replicas.
func waitReplicas(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Count(s, "state=online") == n {
			// After a diskless sync the master streams writes to a new
			// replica only after its first REPLCONF ACK (up to a second
			// later): until then WAIT times out. Wait for that first ack.
			// (WAIT counts acks of its own connection's last write.)
			if n > 0 {
				conn := c.Conn()
				defer conn.Close()
				if err := conn.Incr(ctx, "replicas-settled").Err(); err != nil {
					t.Fatal(err)
				}
				if got, err := conn.Wait(ctx, n, 5*time.Second).Result(); err != nil || got != int64(n) {
					t.Fatalf("WAIT %d: %d, %v", n, got, err)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("master never listed %d online replicas: %v\n%s", n, err, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDurabilityReplicasWait(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	replica := redistest.StartWith(t, redisproc.Options{ReplicaOf: master.Addr})
	mc := master.Client()
	pol := mustPolicy(t, "replicas:1")
	pol.WaitTimeout = 300 * time.Millisecond

	waitReplicas(t, mc, 1)
	rep, err := lease.CheckDurability(ctx, mc, pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Nodes[0].Replicas != 1 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := lease.CheckDurability(ctx, mc, mustPolicy(t, "replicas:2"), nil); !errors.Is(err, lease.ErrNotDurable) ||
		!strings.Contains(err.Error(), "has 1 online replica(s)") || !strings.Contains(err.Error(), "needs at least 2") {
		t.Fatalf("replicas:2 with one replica: %v", err)
	}

	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	// A fresh script (NOSCRIPT on the first EVALSHA) and a cached one.
	for i := range 2 {
		v, err := pol.Run(ctx, mc, incr, []string{"k"}).Int64()
		if err != nil || v != int64(i+1) {
			t.Fatalf("run %d with the replica attached: %d, %v", i, v, err)
		}
	}
	if got, err := replica.Client().Get(ctx, "k").Int64(); err != nil || got != 2 {
		t.Fatalf("replica has k=%d, %v: WAIT returned before the replica had the write", got, err)
	}

	replica.Kill()
	start := time.Now()
	v, err := pol.Run(ctx, mc, incr, []string{"k"}).Int64()
	var nd *lease.NotDurableError
	if !errors.As(err, &nd) || !errors.Is(err, lease.ErrNotDurable) {
		t.Fatalf("with the replica stopped: %d, %v; want a *NotDurableError", v, err)
	}
	if nd.Acked != 0 || nd.Want != 1 || nd.Reply != int64(3) || !strings.Contains(err.Error(), "must not be spent") {
		t.Fatalf("NotDurableError %+v: %v", nd, err)
	}
	list := redis.NewScript(`redis.call('INCR', KEYS[1]) return {0, 7, 1}`)
	err = pol.Run(ctx, mc, list, []string{"k"}).Err()
	if !errors.As(err, &nd) || fmt.Sprint(nd.Int64s()) != "[0 7 1]" {
		t.Fatalf("a list reply not acknowledged: %v, Int64s %v", err, nd.Int64s())
	}
	if took := time.Since(start); took < pol.WaitTimeout {
		t.Fatalf("WAIT gave up after %v, before its timeout %v", took, pol.WaitTimeout)
	}
	// The periodic check sees the replica gone, once the master notices.
	waitReplicas(t, mc, 0)
	if _, err := lease.CheckDurability(ctx, mc, pol, nil); !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "has 0 online replica(s)") {
		t.Fatalf("check with the replica stopped: %v", err)
	}
}

func TestDurabilityRunWithoutWait(t *testing.T) {
	// fsync and none add no WAIT: one round trip, as before.
	srv := redistest.Start(t)
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	for _, p := range []string{"fsync", "none"} {
		if err := mustPolicy(t, p).Run(ctx, srv.Client(), incr, []string{"k"}).Err(); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
