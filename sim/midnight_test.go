package sim

import "testing"

// A campaign whose traffic puts a fifth of the day's SPENDs in hour 0, on
// curve: auto, spends its day: the fitted curve's smoothing stays within
// the day, so hour 23 gets an ordinary hour's share. pacersim on the
// scenario: hour 23 3.45% of the day, 99.92% spent (the curve oracle
// 99.98%); when the moving average wrapped round midnight, hour 0's peak
// gave hour 23 5.17%, budget that met no extra demand there and stayed
// locked: 98.33% spent (the oracle 98.31%).
//
// The scenario declares issue 35's goal for the campaign (expect: tracking
// within 1% at every minute, utilisation at least the less of 99.5% and
// the curve oracle's less 0.2 pt), and runScenario fails on any bound a
// run breaks. The fit's moving average is as narrow as its counts allow
// (daemon.AutoCurveSmooth: none at ~270 SPENDs a slot), so the step at
// 01:00 stays a step; with AutoCurveSmooth returning the former fixed
// half-width of two slots, the run breaks the tracking bound after 01:00.
func TestMidnightPeakIsFitted(t *testing.T) {
	_, c := spendsItsDay(t, "../configs/scenarios/midnight-peak.yaml", Options{})
	if e := c.Expect; e == nil || e.TrackingMax != 0.01 || e.Utilisation != 0.995 || e.BelowIdeal != 0.002 {
		t.Errorf("midnight-peak.yaml declares %+v; want issue 35's row: tracking_max 0.01, utilisation 0.995, below_ideal 0.002", e)
	}
	q := c.Results[StrategyPacer]
	last, ordinary := q.PlanHourShares[23], q.PlanHourShares[12]
	t.Logf("the day's curve: hour 0 %.2f%%, hour 12 %.2f%%, hour 23 %.2f%%; tracking error max %.2f%%",
		100*q.PlanHourShares[0], 100*ordinary, 100*last, 100*q.TrackingMax)
	if last > 1.2*ordinary {
		t.Errorf("the day's curve gives hour 23 %.2f%% of the budget, an ordinary hour %.2f%%: hour 0's peak leaks across midnight", 100*last, 100*ordinary)
	}
	if q.PlanHourShares[0] < 0.15 {
		t.Errorf("the day's curve gives hour 0 %.2f%% of the budget; the traffic, 20%%", 100*q.PlanHourShares[0])
	}
}

// A flat curve under traffic with a day's rhythm (diurnal-london.yaml:
// half the mean rate at night, 1.4x in the evening, demand 1.05x) spends
// its day: the night leaves the campaign behind its curve, and it catches
// up in the evening, leaving nothing locked at midnight. Issue 35's row for
// it: utilisation at least the less of 99.5% and the curve oracle's less
// 0.2 pt, which the scenario declares (judged on every run); the oracle
// reaching ~100% is the case's premise.
func TestDiurnalTrafficOnAFlatCurveSpendsItsDay(t *testing.T) {
	_, c := spendsItsDay(t, "../configs/scenarios/diurnal-london.yaml", Options{})
	if e := c.Expect; e == nil || e.Utilisation != 0.995 || e.BelowIdeal != 0.002 {
		t.Errorf("diurnal-london.yaml declares %+v; want issue 35's row: utilisation 0.995, below_ideal 0.002", e)
	}
	if c.OracleUtilisation < 0.999 {
		t.Errorf("the curve oracle spends %.4f of the budget: the scenario no longer lets a fleet that follows the curve spend its day", c.OracleUtilisation)
	}
	if c.BehindMaxMicros == 0 {
		t.Errorf("the campaign was never behind its curve: the night's traffic no longer tests a catch-up")
	}
}
