package lease_test

import (
	"fmt"
	"testing"
	"time"
)

// CheckDayReport names the moves in flight between a day's shards (their
// first step done, the rest not), with when they began where the mover's
// id says (the reconciler's do): the day balances with them counted, and
// the shards' totals plus what is moving make the day's budget.
func TestCheckDayReportNamesMovesInFlight(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 8_000_000, 2), day)
	began := t0.Add(-3 * time.Second)
	dated := fmt.Sprintf("7.%d.0-1", began.UnixMilli())
	for _, m := range []struct {
		id       string
		from, to int
		amount   int64
	}{{dated, 0, 1, 1_000_000}, {"m1", 1, 0, 250_000}} {
		if taken, err := l.MoveOutForTest(ctx, "c", day, m.from, m.to, m.amount, m.id, t0); err != nil || taken != m.amount {
			t.Fatalf("move out %s = %d, %v", m.id, taken, err)
		}
	}
	r, err := l.CheckDayReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Problems {
		t.Errorf("conservation: %s", p)
	}
	if len(r.Moves) != 2 {
		t.Fatalf("moves in flight: %+v; want 2", r.Moves)
	}
	if m := r.Moves[0]; m.ID != dated || m.From != 0 || m.To != 1 || m.Amount != 1_000_000 || !m.Began.Equal(began) {
		t.Errorf("first move: %+v; want %s, 0 -> 1, 1,000,000, begun at %v", m, dated, began)
	}
	if m := r.Moves[1]; m.ID != "m1" || m.From != 1 || m.To != 0 || m.Amount != 250_000 || !m.Began.IsZero() {
		t.Errorf("second move: %+v; want m1, 1 -> 0, 250,000, begun at an unknown time", m)
	}
	if got := r.Totals.Budget + r.Moves[0].Amount + r.Moves[1].Amount; got != 8_000_000 {
		t.Errorf("shards' budgets %d + moving %d = %d; want the day's 8,000,000", r.Totals.Budget, got-r.Totals.Budget, got)
	}
	if _, err := l.FinishMoves(ctx, "c", day, 2, t0); err != nil {
		t.Fatal(err)
	}
	if r, err := l.CheckDayReport(ctx, "c", day); err != nil || len(r.Moves) != 0 || len(r.Problems) != 0 || r.Totals.Budget != 8_000_000 {
		t.Errorf("after FinishMoves: %+v, %v; want no move, no problem, 8,000,000 in the shards", r, err)
	}
}
