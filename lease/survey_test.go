package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// SurveyCampaigns reads many campaigns in one call: each campaign's days,
// and each of today's shards (expired leases, a shard missing), recording
// the reconciler's fence on every shard it read; a newer fence anywhere
// refuses the whole call, and a campaign whose keys do not parse fails
// alone.
func TestSurveyCampaigns(t *testing.T) {
	l, srv := newLedger(t)
	rdb := srv.Client()
	const day, yesterday = "2026-11-21", "2026-11-20"
	for _, id := range []string{"idle", "expired", "lost", "bad"} {
		mustOpen(t, l, campaign(id, 8_000_000, 2), day)
	}
	mustOpen(t, l, campaign("shut", 8_000_000, 2), yesterday)
	now := t0.Add(12 * time.Hour)
	k := lease.ShardKey{Campaign: "expired", Day: day, Shard: 1}
	if _, err := l.Grant(ctx, grantReq("L1", k, 1000, now, ppb/2)); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, lease.ShardKey{Campaign: "lost", Day: day, Shard: 0}.RedisKeys()[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "pacer:days:{bad}", day, "x").Err(); err != nil {
		t.Fatal(err)
	}
	ids := []string{"idle", "expired", "lost", "bad", "shut", "none"}
	reqs := make([]lease.SurveyRequest, len(ids))
	for i, id := range ids {
		reqs[i] = lease.SurveyRequest{Campaign: id, Today: day, Yesterday: yesterday, Cutoff: now.Add(time.Minute)}
	}
	svs, err := l.SurveyCampaigns(ctx, reqs, 7)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]lease.Survey{}
	for i, id := range ids {
		got[id] = svs[i]
	}
	if sv := got["idle"]; sv.Err != nil || sv.TodayShards != 2 || len(sv.Today) != 2 || sv.Today[0].Budget != 4_000_000 || sv.Expired || sv.Lost || sv.PendingMoves {
		t.Errorf("idle: %+v", sv)
	}
	if sv := got["expired"]; sv.Err != nil || !sv.Expired || sv.Today[1].Leased == 0 {
		t.Errorf("expired: %+v", sv)
	}
	if sv := got["lost"]; sv.Err != nil || !sv.Lost {
		t.Errorf("lost: %+v", sv)
	}
	if sv := got["bad"]; sv.Err == nil || sv.TodayShards != 0 {
		t.Errorf("bad: %+v, want its error alone", sv)
	}
	if sv := got["shut"]; sv.Err != nil || sv.TodayShards != 0 || sv.YesterdayShards != 2 || sv.Reported {
		t.Errorf("shut: %+v", sv)
	}
	if sv := got["none"]; sv.Err != nil || sv.TodayShards != 0 || sv.YesterdayShards != 0 {
		t.Errorf("none: %+v", sv)
	}
	for _, c := range []struct {
		id    string
		shard int
		want  string
	}{{"idle", 0, "7"}, {"idle", 1, "7"}, {"expired", 1, "7"}, {"lost", 1, "7"}, {"shut", 0, "0"}} {
		d := day
		if c.id == "shut" {
			d = yesterday
		}
		v, _ := rdb.HGet(ctx, lease.ShardKey{Campaign: c.id, Day: d, Shard: c.shard}.RedisKeys()[0], "fence").Result()
		if v != c.want {
			t.Errorf("%s/%d: fence %q, want %q", c.id, c.shard, v, c.want)
		}
	}
	if n, _ := rdb.Exists(ctx, lease.ShardKey{Campaign: "lost", Day: day, Shard: 0}.RedisKeys()[0]).Result(); n != 0 {
		t.Errorf("the survey created the missing shard's state")
	}
	// A deposed leader: refused, and nothing of its fence recorded.
	if _, err := l.SurveyCampaigns(ctx, reqs[:1], 6); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("a survey with an older fence: %v, want ErrFenced", err)
	}
	// No election (fence 0): read, nothing recorded.
	if svs, err := l.SurveyCampaigns(ctx, reqs[:1], 0); err != nil || svs[0].TodayShards != 2 {
		t.Fatalf("a survey without a fence: %+v, %v", svs, err)
	}
	if v, _ := rdb.HGet(ctx, lease.ShardKey{Campaign: "idle", Day: day, Shard: 0}.RedisKeys()[0], "fence").Result(); v != "7" {
		t.Errorf("fence %q after a stale and an unfenced survey, want 7", v)
	}
}
