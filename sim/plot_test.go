package sim

import (
	"testing"

	"gonum.org/v1/plot/plotter"
)

// Baselines that spend alike are drawn as stripes, widest first, pacer on
// top; one whose line is another's says so in the legend.
func TestStrategyLinesDoNotHideEachOther(t *testing.T) {
	up := plotter.XYs{{X: 0, Y: 0}, {X: 12, Y: 0.75}, {X: 24, Y: 1}}
	diag := plotter.XYs{{X: 0, Y: 0}, {X: 12, Y: 0.5}, {X: 24, Y: 1}}
	names := []string{StrategyPacer, StrategyLua, StrategyBatch, StrategyNoPacing}
	lines, got, err := strategyLines(names, []plotter.XYs{diag, up, {{X: 0, Y: 0}, {X: 12, Y: 0.7}, {X: 24, Y: 1}}, up})
	if err != nil {
		t.Fatal(err)
	}
	var widths []float64
	for _, l := range lines {
		widths = append(widths, float64(l.Width))
	}
	if len(widths) != 4 || !(widths[0] > widths[1] && widths[1] > widths[2]) {
		t.Errorf("line widths in drawing order %v: want the baselines widest first", widths)
	}
	if sameAs([]plotter.XYs{diag, up, up}, 2) != 1 || sameAs([]plotter.XYs{diag, up}, 1) != -1 {
		t.Error("sameAs does not find the one identical earlier series")
	}
	want := []string{"(a) Lua check-and-decrement per SPEND", "(b) 8 sharded keys, 100 ms write batching",
		"(c) no pacing, stop at budget, the same line as (a)", "pacer"}
	if len(got) != len(want) {
		t.Fatalf("legend %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("legend entry %d: %q; want %q", i, got[i], want[i])
		}
	}
}
