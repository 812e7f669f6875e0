package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// grantReleaseN writes 2n audit events on shard k: n grants and n releases.
func grantReleaseN(t *testing.T, l *lease.Ledger, k lease.ShardKey, prefix string, n int) {
	t.Helper()
	now := t0.Add(12 * time.Hour)
	for i := range n {
		id := prefix + strconv.Itoa(i)
		if _, err := l.Grant(ctx, grantReq(id, k, 1_000, now, ppb/2)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, k, id, 0, now); err != nil {
			t.Fatal(err)
		}
	}
}

// A stream's cap is kept when the lease calls count their events in rp
// (Config.PackedCounters): a call appends uncapped without asking only while
// r_events plus rp's events is below the cap.
func TestPackedCountersKeepTheAuditCap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour, AuditMaxLen: 10, PackedCounters: true}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("capped", 1_000_000_000, 1), day)
	k := shardKey("capped", day, 0)
	grantReleaseN(t, l, k, "L", 200)
	if n := rdb.XLen(ctx, k.AuditKey()).Val(); n >= 401 {
		t.Fatalf("the stream without a group holds %d entries: the cap (10, approximate) did not apply", n)
	}
	if v, err := rdb.HGet(ctx, k.RedisKeys()[0], "r_events").Result(); err != nil || v != "1" {
		t.Fatalf("r_events %q (%v), want 1: the open's, the lease calls' in rp", v, err)
	}
}

// An audit stream without a consumer group keeps the ledger's cap; one with
// a group (an exporter reads it) is not capped, and TrimAudit drops only what
// every group acknowledged: not what a consumer holds unacknowledged, not what
// a second group has not read.
func TestAuditTrimKeepsWhatWasNotExported(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour, AuditMaxLen: 10}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("capped", 1_000_000_000, 1), day)
	mustOpen(t, l, campaign("exported", 1_000_000_000, 1), day)
	capped, exported := shardKey("capped", day, 0), shardKey("exported", day, 0)

	if n, id, err := l.TrimAudit(ctx, capped); err != nil || n != 0 || id != "" {
		t.Fatalf("trim without a group: %d entries at %q, %v; want none", n, id, err)
	}
	if err := rdb.XGroupCreate(ctx, exported.AuditKey(), "a", "0").Err(); err != nil {
		t.Fatal(err)
	}
	grantReleaseN(t, l, capped, "L", 200)
	grantReleaseN(t, l, exported, "L", 200)
	if n := rdb.XLen(ctx, capped.AuditKey()).Val(); n >= 401 {
		t.Fatalf("the stream without a group holds %d entries: the cap (10, approximate) did not apply", n)
	}
	if n := rdb.XLen(ctx, exported.AuditKey()).Val(); n != 401 {
		t.Fatalf("the exported stream holds %d entries, want all 401 (open + 200 grants + 200 releases)", n)
	}

	// Group a reads 300 and acknowledges the first 250; then group b reads
	// 100 after them and acknowledges them, and a acknowledges the rest.
	read := func(group string, n int64) []redis.XMessage {
		s, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{exported.AuditKey(), ">"}, Count: n}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return s[0].Messages
	}
	msgs := read("a", 300)
	for _, m := range msgs[:250] {
		rdb.XAck(ctx, exported.AuditKey(), "a", m.ID)
	}
	n, minID, err := l.TrimAudit(ctx, exported)
	if err != nil || n != 250 || minID != msgs[250].ID {
		t.Fatalf("trim: %d entries below %q, %v; want 250 below the first pending %s", n, minID, err, msgs[250].ID)
	}
	if err := rdb.XGroupCreate(ctx, exported.AuditKey(), "b", msgs[249].ID).Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range read("b", 100) {
		rdb.XAck(ctx, exported.AuditKey(), "b", m.ID)
	}
	for _, m := range msgs[250:] {
		rdb.XAck(ctx, exported.AuditKey(), "a", m.ID)
	}
	if n, minID, err = l.TrimAudit(ctx, exported); err != nil || n != 49 || minID != msgs[299].ID {
		t.Fatalf("trim with b past a: %d entries below %q, %v; want 49, below a's last delivered %s", n, minID, err, msgs[299].ID)
	}
	first := rdb.XRangeN(ctx, exported.AuditKey(), "-", "+", 1).Val()
	if len(first) != 1 || first[0].ID != msgs[299].ID {
		t.Fatalf("after trims the stream starts at %v, want %s", first, msgs[299].ID)
	}
	streams, err := l.AuditStreams(ctx)
	if err != nil || len(streams) != 2 || streams[0] != capped || streams[1] != exported {
		t.Fatalf("AuditStreams: %v, %v; want [%v %v]", streams, err, capped, exported)
	}
	if k, ok := lease.ParseAuditKey(exported.AuditKey()); !ok || k != exported {
		t.Fatalf("ParseAuditKey(%q) = %v, %v", exported.AuditKey(), k, ok)
	}
}

// A grant, renewal or release asks neither whether its audit stream is
// exported (XINFO GROUPS) while the stream cannot have reached the cap, nor
// whether the shard's done key exists once it has one (EXISTS): both are
// known from the state it reads anyway. From the event that may reach the
// cap on, it asks again, and the cap applies as before.
func TestLeaseCallsAskNoStreamGroupsBelowTheCap(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	const maxLen = 12
	l := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour, AuditMaxLen: maxLen}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 1_000_000_000, 1), day)
	k := shardKey("c", day, 0)
	counts := func() (xinfo, exists int64) {
		t.Helper()
		info := rdb.Info(ctx, "commandstats").Val()
		return commandCalls(info, "xinfo|groups"), commandCalls(info, "exists")
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The open wrote 1 event; each round writes 4 (grant, the renewal's
	// release and grant, the release): 9 after two rounds, 13 after three.
	now := t0.Add(12 * time.Hour)
	round := func(i int) {
		t.Helper()
		id := "L" + strconv.Itoa(i)
		if _, err := l.Grant(ctx, grantReq(id, k, 1_000, now, ppb/2)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Renew(ctx, id, 500, grantReq(id+"r", k, 1_000, now, ppb/2)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Release(ctx, k, id+"r", 0, now); err != nil {
			t.Fatal(err)
		}
	}
	round(0)
	round(1)
	if xinfo, exists := counts(); xinfo != 0 || exists != 1 {
		t.Fatalf("6 calls, 9 events of %d: XINFO GROUPS %d, EXISTS %d; want 0 and 1 (the first done record)", maxLen, xinfo, exists)
	}
	round(2) // its release is the 13th event: over the cap, the stream's groups matter
	if xinfo, _ := counts(); xinfo != 1 {
		t.Fatalf("13 events of %d: XINFO GROUPS %d, want 1 (the call that may pass the cap)", maxLen, xinfo)
	}
	if n := rdb.XLen(ctx, k.AuditKey()).Val(); n != 13 {
		t.Fatalf("the stream holds %d entries, want all 13", n)
	}
	if ttl := rdb.PTTL(ctx, "pacer:{c/"+day+"/0}:done").Val(); ttl <= 0 {
		t.Fatalf("the done key's expiry: %v, want one", ttl)
	}
}
