package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A shard's state hash and its done hash (closed lease ids, looked up by
// every grant, renewal and release) become hashtables at its day's 32nd
// grant (each field a call touches is then a lookup, not a scan of the
// listpack from its start) and stay ones; a shard with fewer grants keeps
// the listpack's smaller memory. Renewals count as grants; releases and
// settlements do not. The field that converts done is no lease id: an id
// granted, renewed and released after it is answered as any other.
func TestBusyShardStateIsAHashtable(t *testing.T) {
	l, srv := newLedger(t)
	rdb := srv.Client()
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 86_400_000_000, 2), day)
	busy := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	quiet := lease.ShardKey{Campaign: "c", Day: day, Shard: 1}
	encodingOf := func(k lease.ShardKey, key string) string {
		t.Helper()
		e, err := rdb.ObjectEncoding(ctx, "pacer:{c/"+day+"/"+strconv.Itoa(k.Shard)+"}:"+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	encoding := func(k lease.ShardKey) string { return encodingOf(k, "state") }
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
		if e, d := encoding(busy), encodingOf(busy, "done"); e != "listpack" || d != "listpack" {
			t.Fatalf("after %d grants: encoding %s, done's %s, want listpack", grants, e, d)
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
	if e, d := encoding(busy), encodingOf(busy, "done"); e != "hashtable" || d != "hashtable" {
		t.Fatalf("after 32 grants: encoding %s, done's %s, want hashtable", e, d)
	}
	if _, err := l.Release(ctx, busy, "h1-boot-y", 0, now); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cycle(busy, 200+i)
	}
	for i := range 5 {
		cycle(quiet, 100+i)
	}
	if e, d := encoding(quiet), encodingOf(quiet, "done"); e != "listpack" || d != "listpack" {
		t.Fatalf("a shard with 10 grants: encoding %s, done's %s, want listpack", e, d)
	}
	if e, d := encoding(busy), encodingOf(busy, "done"); e != "hashtable" || d != "hashtable" {
		t.Fatalf("after 38 grants: encoding %s, done's %s, want hashtable", e, d)
	}
	r, err := l.BuildReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	if r.Leases != 48 || r.Outstanding != 0 || r.Returned != 23*2*100 {
		t.Errorf("report %+v: want 48 leases, none outstanding, 4,600 returned (23 cycles)", r)
	}
	mustBalance(t, l, "c", day)
}
