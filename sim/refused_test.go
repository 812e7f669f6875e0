package sim

import (
	"strings"
	"testing"
)

// A host whose ledger gate refuses new leases for four hours (as for a
// clock off by more than the skew bound) while its clients keep sending it 35%
// of the SPENDs: the two hosts that serve take the fleet's rate
// between them, so every campaign stays within the "behind the curve" bound
// through the fault (runScenario fails on any invariant) and the busy ones
// lose at most 2 points of their day (issue 35's goal). Metered to their
// shares from before the fault, they would lose about the refused host's
// part of those hours, 35% x 4/24, near 6 points.
func TestRefusedHostSharesFollowTheServers(t *testing.T) {
	res := runScenario(t, "../configs/scenarios/refused-host.yaml", Options{})
	var refused, again bool
	for _, f := range res.Faults {
		refused = refused || strings.Contains(f.What, "h2's ledger gate refuses")
		again = again || strings.Contains(f.What, "h2 takes leases again")
	}
	if !refused || !again {
		t.Fatalf("faults %+v: want h2 refused, then taking leases again", res.Faults)
	}
	for _, c := range res.Campaigns {
		q := c.Results[StrategyPacer]
		t.Logf("%s: utilisation %.4f (the curve oracle %.4f), host shares %.3f of the spend, %.3f of the SPENDs; behind at most %d of %d",
			c.ID, q.Utilisation, c.OracleUtilisation, q.HostShares, q.HostRequestShares, c.BehindMaxMicros, c.BehindBoundMicros)
		if q.OverspendMicros > 0 {
			t.Errorf("%s: overspent %d micros", c.ID, q.OverspendMicros)
		}
		if strings.HasPrefix(c.ID, "busy") && q.Utilisation < 0.98 {
			t.Errorf("%s: utilisation %.4f; the hosts that serve should lose at most 2 points", c.ID, q.Utilisation)
		}
		if strings.HasPrefix(c.ID, "busy") && len(q.HostShares) == 3 && q.HostShares[1] > q.HostRequestShares[1]-0.03 {
			t.Errorf("%s: h2 spent %.3f of the day, asked %.3f: it should have served nothing for four hours", c.ID, q.HostShares[1], q.HostRequestShares[1])
		}
	}
}
