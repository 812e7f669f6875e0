package lease

import (
	"context"
	"testing"
	"time"
)

// LuaPreludeForTest lets tests run the shared Lua helpers directly, in a
// script that starts its call as the library's functions do (begin_call).
var LuaPreludeForTest = luaPrelude + "\nbegin_call()\n"

// MoveOutForTest runs only the first step of a move, as a mover that crashed
// right after it would leave it.
func (l *Ledger) MoveOutForTest(ctx context.Context, campaign, day string, from, to int, amount int64, moveID string, now time.Time) (int64, error) {
	rep, err := l.run(ctx, moveOutScript, ShardKey{campaign, day, from}, moveID, amount, to, 0, now.UnixMilli(), l.cfg.AuditMaxLen)
	return rep.Value, err
}

// BeginDayOpForTest begins a day op without applying it, as a caller that
// crashed right after would leave it.
func (l *Ledger) BeginDayOpForTest(ctx context.Context, campaign, day, opID string, delta int64) error {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return err
	}
	_, _, err = l.beginDayOp(ctx, campaign, day, opID, delta, Split(delta, n))
	return err
}

// GrantPreviousReleaseForTest grants req by the previous release's grant
// (testdata), as a daemon of that release does during a rolling upgrade: on
// a Cluster it writes its slot's index entry and no anchor.
func (l *Ledger) GrantPreviousReleaseForTest(t *testing.T, req GrantRequest) int64 {
	t.Helper()
	rep, err := l.run(context.Background(), loadPreviousRelease(t).grant, req.Shard, l.previousGrantArgs(req)...)
	st, g := rep.Status, rep.Value
	if err != nil || st != 0 || g <= 0 {
		t.Fatalf("the previous release's grant on %s: status %d, granted %d: %v", req.Shard, st, g, err)
	}
	return g
}
