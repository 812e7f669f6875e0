package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

type clockAt time.Time

func (c clockAt) Now() time.Time { return time.Time(c) }

// check compares each Redis master's watermark with the one the reconciler
// records in etcd: without --etcd it says it could not; after a restore
// from a copy older than the last pass it exits 1 naming the master and
// the days it holds; once the reconciler has frozen them, it exits 1
// naming each frozen shard.
func TestCheckWatermark(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	e, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	h.ok("campaign", "set", "c1", "--daily", "10units", "--shards", "2")
	day := h.openToday("c1")
	rc := reconcile.New(h.ledger, reconcile.Config{Clock: clockAt(t0), Watermarks: reconcile.NewEtcdWatermarks(cli)})
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}

	r := h.run("check")
	if r.code != 0 || !strings.Contains(r.stdout, "unchecked watermark: could not compare") {
		t.Errorf("check without --etcd: %+v", r)
	}
	withEtcd := func(args ...string) result { return h.run(append([]string{"--etcd", e.Endpoint}, args...)...) }
	r = withEtcd("check")
	if r.code != 0 || !strings.Contains(r.stdout, "ok watermark redis (") {
		t.Errorf("check with --etcd, nothing lost: %+v", r)
	}

	rdb := h.redis.Client()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	backup := h.redis.Snapshot(keys...)
	if err := rc.Step(ctx, 1); err != nil { // advanced past the backup
		t.Fatal(err)
	}
	k := lease.ShardKey{Campaign: "c1", Day: day.Key, Shard: 0}
	grant(t, h.ledger, k, "L1", "host-a", 1_000_000, t0, t0.Add(30*time.Second), day.Start)
	now, _ := rdb.Keys(ctx, "*").Result()
	h.redis.Restore(backup, append(keys, now...)...)

	r = withEtcd("check")
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL watermark redis (") || !strings.Contains(r.stdout, "lost acknowledged writes") ||
		!strings.Contains(r.stdout, "freezes its shards of c1 "+day.Key) || !strings.Contains(r.stderr, "1 Redis master(s) behind") {
		t.Errorf("check after a restore: %+v", r)
	}
	r = withEtcd("--json", "check")
	var days []dayCheck
	if err := json.Unmarshal([]byte(r.stdout), &days); err != nil || r.code != 1 || !strings.Contains(r.stderr, "FAIL watermark redis") {
		t.Errorf("check --json after a restore: %+v %v", r, err)
	}

	// The reconciler's next pass freezes the day: check names each shard.
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--etcd", e.Endpoint, "check"}, {"check"}} {
		r = h.run(args...)
		for shard := range 2 {
			want := "FAIL c1 " + day.Key + ": c1/" + day.Key + "/" + string(rune('0'+shard)) + ": the ledger lost acknowledged writes"
			if r.code != 1 || !strings.Contains(r.stdout, want) {
				t.Errorf("%v after the reconciler froze the day: want %q in %+v", args, want, r)
			}
		}
	}
	if r = withEtcd("check"); !strings.Contains(r.stdout, "ok watermark redis (") {
		t.Errorf("the watermark after the reconciler recorded the rollback: %+v", r)
	}
}
