package daemon

import (
	"math"
	"testing"

	"github.com/pacer/pacer/lease"
)

// A host's share of a campaign's demand, judged on whole demand slots. Three
// hosts ask 45/35/20% of a steady demand; the two large ones flush every
// minute, the small one every 5 minutes (a sparse campaign there), at
// another phase. Judged on the slot in progress, where the others' counts
// lag a host's own by up to their flush interval, these hosts put
// themselves at 64/39/22% (and TestStandingHostsSpendByDemand's small host
// at 40%). Once a whole slot has been judged, each host is within a point
// of its share, and a host that joined mid-slot waits for a slot it counted
// whole.
func TestShareIsJudgedOnWholeSlots(t *testing.T) {
	const slotMinutes = 24 * 60 / lease.DemandSlots // 15
	weights := []float64{0.45, 0.35, 0.20}
	every := []int{1, 1, 5}  // minutes between flushes
	phase := []int{0, 0, 3}  // first flush, in minutes
	const perMinute = 60_000 // micros asked a minute, fleet-wide
	hosts := make([]*campaign, len(weights))
	for i := range hosts {
		hosts[i] = &campaign{}
	}
	fleet := map[int]int64{} // slot -> micros asked, as the ledger's hash
	pending := make([]float64, len(weights))
	for minute := 1; minute <= 120; minute++ {
		for h, w := range weights {
			pending[h] += w * perMinute
			if minute < phase[h] || (minute-phase[h])%every[h] != 0 {
				continue
			}
			slot := minute / slotMinutes
			asked := int64(pending[h])
			pending[h] -= float64(asked)
			fleet[slot] += asked
			hosts[h].updateShare("d", slot, asked, lease.FleetAsked{Slot: fleet[slot], Before: fleet[slot-1]})
		}
		if minute == 2*slotMinutes+4 { // into the third slot: the second was judged whole
			for h, w := range weights {
				if !hosts[h].shareJudged {
					t.Fatalf("minute %d: host %d has not judged a whole slot", minute, h)
				}
				if got := hosts[h].share; math.Abs(got-w) > 0.01 {
					t.Errorf("minute %d: host %d's share %.3f, want %.2f", minute, h, got, w)
				}
			}
		}
	}
	for h, w := range weights {
		if got := hosts[h].share; math.Abs(got-w) > 0.01 {
			t.Errorf("after 2 h: host %d's share %.3f, want %.2f", h, got, w)
		}
	}

	// A host whose first flush falls mid-slot judges neither that slot
	// (it did not count its start) nor its stand-in from it.
	late := &campaign{}
	late.updateShare("d", 3, 1_000, lease.FleetAsked{Slot: 10_000, Before: 40_000})
	if late.shareJudged || late.share != 0.1 {
		t.Errorf("first flush: judged %v, share %.3f; want the slot in progress's 0.1 alone", late.shareJudged, late.share)
	}
	late.updateShare("d", 4, 2_000, lease.FleetAsked{Slot: 10_000, Before: 50_000})
	if late.shareJudged {
		t.Error("judged slot 3, which the host joined mid-way")
	}
	late.updateShare("d", 5, 3_000, lease.FleetAsked{Slot: 10_000, Before: 20_000})
	if !late.shareJudged || math.Abs(late.share-0.1) > 1e-3 {
		t.Errorf("after slot 4, counted whole: judged %v, share %.3f; want 2,000 of 20,000", late.shareJudged, late.share)
	}
	// A slot with no flush from this host breaks the run: the next one is
	// not counted from its start.
	late.updateShare("d", 7, 1_000, lease.FleetAsked{Slot: 5_000, Before: 1_000})
	late.updateShare("d", 8, 1_000, lease.FleetAsked{Slot: 5_000, Before: 1_000})
	if math.Abs(late.share-0.1) > 1e-3 {
		t.Errorf("judged slot 7 after a gap: share %.3f, want 0.1 still", late.share)
	}
}

// Issue 35 (the tiny scenario, seed 10): a host with 45% of a 60-bid
// campaign's SPENDs first judged a whole slot in which the fleet asked
// 7,214 micros (three or four SPENDs of a 2,000 mean) and it asked 368.
// Taken whole, that slot set its share to 0.05, and its spend meter held it
// there for thirteen hours (no later slot of it was judged whole), refusing
// its fetches while the campaign fell four bids behind its curve. A slot of
// a few SPENDs moves the share n/(n+8) of the way (pace.ShareWeight).
func TestSparseSlotMovesTheShareLittle(t *testing.T) {
	c := &campaign{fleetUnit: 4_000, meanSpend: 2_000, meanSpends: meanSpendWindow}
	c.updateShare("d", 2, 3_415, lease.FleetAsked{Slot: 3_415, Before: 5_223}) // the stand-in: all of slot 2 so far
	c.updateShare("d", 3, 368, lease.FleetAsked{Slot: 4_367, Before: 3_415})
	standIn := c.share
	c.updateShare("d", 4, 1_015, lease.FleetAsked{Slot: 1_015, Before: 7_214}) // slot 3 judged: 368 of 7,214
	if !c.shareJudged {
		t.Fatal("slot 3, counted whole, was not judged")
	}
	n := 7_214 / c.meanBid()
	if want := standIn + n/(n+8)*(368.0/7_214-standIn); math.Abs(c.share-want) > 1e-9 || c.share < 0.3 {
		t.Errorf("after a slot of %.1f SPENDs, 5%% of them this host's: share %.3f (stand-in %.3f); want %.3f, the stand-in moved %.2f of the way",
			n, c.share, standIn, want, n/(n+8))
	}
}
