package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A shard's state hash becomes a hashtable at its day's 32nd grant (each
// field a call touches is then a lookup, not a scan of the listpack from
// its start) and stays one; a shard with fewer grants keeps the listpack's
// smaller memory. Renewals count as grants; releases and settlements do not.
func TestBusyShardStateIsAHashtable(t *testing.T) {
	l, srv := newLedger(t)
	rdb := srv.Client()
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 86_400_000_000, 2), day)
	busy := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	quiet := lease.ShardKey{Campaign: "c", Day: day, Shard: 1}
	encoding := func(k lease.ShardKey) string {
		t.Helper()
		e, err := rdb.ObjectEncoding(ctx, "pacer:{c/"+day+"/"+strconv.Itoa(k.Shard)+"}:state").Result()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	now := t0.Add(12 * time.Hour)
	grants := 0
	cycle := func(k lease.ShardKey, i int) {
		t.Helper()
		id := "h1-boot-" + strconv.Itoa(i)
		if _, err := l.Grant(ctx, grantReq(id, k, 1000, now, ppb/2)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Renew(ctx, id, 100, grantReq(id+"r", k, 1000, now, ppb/2)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, k, id+"r", 100, now); err != nil {
			t.Fatal(err)
		}
		if k == busy {
			grants += 2
		}
	}
	for i := 0; grants < 30; i++ {
		cycle(busy, i)
		if e := encoding(busy); e != "listpack" {
			t.Fatalf("after %d grants: encoding %s, want listpack", grants, e)
		}
	}
	if _, err := l.Grant(ctx, grantReq("h1-boot-x", busy, 1000, now, ppb/2)); err != nil {
		t.Fatal(err)
	}
	if e := encoding(busy); e != "listpack" {
		t.Fatalf("after 31 grants: encoding %s, want listpack", e)
	}
	if _, err := l.Renew(ctx, "h1-boot-x", 0, grantReq("h1-boot-y", busy, 1000, now, ppb/2)); err != nil {
		t.Fatal(err)
	}
	if e := encoding(busy); e != "hashtable" {
		t.Fatalf("after 32 grants: encoding %s, want hashtable", e)
	}
	if _, err := l.Release(ctx, busy, "h1-boot-y", 0, now); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		cycle(quiet, 100+i)
	}
	if e := encoding(quiet); e != "listpack" {
		t.Fatalf("a shard with 10 grants: encoding %s, want listpack", e)
	}
	mustBalance(t, l, "c", day)
}
