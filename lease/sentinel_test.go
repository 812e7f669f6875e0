package lease_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

func TestParseSentinel(t *testing.T) {
	opt, err := lease.ParseSentinel("sentinel://pacer-ledger@10.0.0.1:26379, 10.0.0.2:26379")
	if err != nil {
		t.Fatal(err)
	}
	if opt.MasterName != "pacer-ledger" || fmt.Sprint(opt.SentinelAddrs) != "[10.0.0.1:26379 10.0.0.2:26379]" || !opt.ContextTimeoutEnabled {
		t.Fatalf("options %+v", opt)
	}
	for in, want := range map[string]string{
		"redis://m@h:1":           "want sentinel://master-name@host:port",
		"sentinel://h:1":          "no master name",
		"sentinel://@h:1":         "no master name",
		"sentinel://m@h":          `sentinel "h": want host:port`,
		"sentinel://m@h:0":        "port: want 1 to 65535",
		"sentinel://m@h:1,h:1":    "listed twice",
		"sentinel://m@":           `sentinel "": want host:port`,
		"sentinel://a/b@h:1":      "no '/'",
		"sentinel://m@h:1,,h:2":   `sentinel "": want host:port`,
		"sentinel://m@[::1]:2637": "",
	} {
		_, err := lease.ParseSentinel(in)
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// TestSentinelFailover runs a master, a replica and a Sentinel, reaches the
// master through sentinel://, checks replicas:1 on it, then kills the master
// and follows the failover to the promoted replica.
func TestSentinelFailover(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	replica := redistest.StartWith(t, redisproc.Options{ReplicaOf: master.Addr, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	waitReplicas(t, master.Client(), 1)
	host, port, _ := strings.Cut(master.Addr, ":")
	sentinel := redistest.StartWith(t, redisproc.Options{Sentinel: true, Conf: fmt.Sprintf(
		"sentinel monitor ledger %s %s 1\nsentinel down-after-milliseconds ledger 300\nsentinel failover-timeout ledger 2000\n", host, port)})

	rdb, err := lease.NewSentinelClient("sentinel://ledger@" + sentinel.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	pol := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: 2 * time.Second}
	rep, err := lease.CheckDurability(ctx, rdb, pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := master.Addr + " (Sentinel master)"; rep.Nodes[0].Addr != want || rep.Nodes[0].Replicas != 1 {
		t.Fatalf("report %+v, want the master %s with one replica", rep, want)
	}
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if v, err := pol.Run(ctx, rdb, incr, []string{"k"}).Int64(); err != nil || v != 1 {
		t.Fatalf("WAITed write through Sentinel: %d, %v", v, err)
	}

	// The master dies; Sentinel promotes the replica, which has the WAITed
	// write, and the client follows.
	master.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := rdb.Incr(ctx, "k").Result()
		if err == nil {
			if v != 2 {
				t.Fatalf("after failover k = %d, want 2: the promoted replica lost the acknowledged write", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if role, err := replica.Client().Do(ctx, "role").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("the replica's role after failover: %v, %v", role, err)
	}
	// The new master has no replica: replicas:1 refuses it, naming it.
	_, err = lease.CheckDurability(ctx, rdb, pol, nil)
	if err == nil || !strings.Contains(err.Error(), "redis at "+replica.Addr+" (Sentinel master) has 0 online replica(s)") {
		t.Fatalf("check after failover: %v", err)
	}
}
