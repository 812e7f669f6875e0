package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A move of budget between two shards of a day whose mover died after its
// first step: check names it as pending (from, to, amount, age), with ok's
// totals adding up to the day's budget (moving=), and passes; once it is
// older than --stale-after (default 10m), check fails, naming it.
func TestCheckNamesPendingMoves(t *testing.T) {
	h := newHarness(t)
	h.ok("campaign", "set", "c1", "--daily", "10units", "--shards", "2")
	h.openToday("c1")
	recent := fmt.Sprintf("7.%d.0-1", t0.Add(-3*time.Second).UnixMilli()) // as the reconciler names moves
	h.moveOut(0, 1, 500_000, recent)

	r := h.run("check", "c1")
	want := "ok c1 2099-03-08 budget=9500000 locked=9500000 available=0 leased=0 spent=0 moving=500000\n" +
		"pending c1 2099-03-08: move " + recent + " of 500000 micros from shard 0 to shard 1, begun 3s ago (the day's budget counts it; the reconciler finishes it)\n"
	if out := withoutDurability(r.stdout); r.code != 0 || out != want {
		t.Errorf("check with a move in flight: exit %d\nstdout %q\nwant   %q\nstderr %q", r.code, out, want, r.stderr)
	}
	r = h.run("--json", "check", "c1")
	var days []dayCheck
	if err := json.Unmarshal([]byte(r.stdout), &days); err != nil || r.code != 0 || len(days) != 1 || !days[0].OK ||
		len(days[0].Moves) != 1 || days[0].Moves[0].Amount != 500_000 || days[0].Moves[0].To != 1 {
		t.Errorf("check --json with a move in flight: %+v %v", r, err)
	}

	stale := fmt.Sprintf("debt.7.%d.1-0", t0.Add(-11*time.Minute).UnixMilli())
	h.moveOut(1, 0, 200_000, stale)
	r = h.run("check", "c1")
	wantFail := "FAIL c1 2099-03-08: c1/2099-03-08/1: move " + stale + " of 200000 micros to shard 0 begun 11m0s ago and not finished (--stale-after 10m0s): is a reconciler elected? (pacerctl status)\n"
	if out := withoutDurability(r.stdout); r.code != 1 || !strings.HasPrefix(out, wantFail) ||
		!strings.Contains(out, "pending c1 2099-03-08: move "+stale+" of 200000 micros from shard 1 to shard 0, begun 11m0s ago") ||
		r.stderr != "pacerctl: check: 1 problem(s) in 1 campaign-day(s) checked\n" {
		t.Errorf("check with a stale move: exit %d\nstdout %q\nwant it to begin %q\nstderr %q", r.code, out, wantFail, r.stderr)
	}
	if r := h.run("check", "c1", "--stale-after", "1h"); r.code != 0 {
		t.Errorf("check --stale-after 1h: %+v", r)
	}
}

// moveOut does what a move's first step (move_out) does on the source shard
// of the harness's day, as a mover that died right after it leaves it: the
// budget leaves the source's locked, and the move is recorded pending.
func (h *harness) moveOut(from, to int, amount int64, id string) {
	h.t.Helper()
	ctx := context.Background()
	tag := fmt.Sprintf("pacer:{c1/2099-03-08/%d}:", from)
	rdb := h.redis.Client()
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, tag+"state", "budget", -amount)
		p.HIncrBy(ctx, tag+"state", "locked", -amount)
		p.HSet(ctx, tag+"moves", id, fmt.Sprintf("out|%d|%d|pending", amount, to))
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
}
