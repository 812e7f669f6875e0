package daemon

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pacer/pacer/lease"
)

// shareRing is the ledger's side of the hosts' demand flushes for
// updateShare: the slots' and minutes' micros asked, as AddDemand counts
// them.
type shareRing struct{ slots, minutes map[int64]int64 }

func (r *shareRing) flush(c *campaign, second int64, asked int64) {
	minute, slot := second/60, second/(15*60)
	rc := c.shareSpan("d", minute)
	r.slots[slot] += asked
	r.minutes[minute] += asked
	f := lease.FleetAsked{Slot: r.slots[slot], Before: r.slots[slot-1]}
	for m := rc.From; rc.From > 0 && m <= rc.To; m++ {
		f.Span += r.minutes[m]
	}
	c.updateShare("d", int(slot), rc, asked, f)
}

// A host's share of a campaign's demand, judged on spans of whole minutes
// (condition 15). Three hosts ask 45/35/20% of a steady demand; the two
// large ones flush every minute, the small one every 5 minutes (a sparse
// campaign there), each at its own second, and flushes that come in the
// same second reach the ledger in any order. Judged on the slot in
// progress, where the others' counts lag a host's own by up to their flush
// interval, these hosts put themselves at 64/39/22%; judged on spans of one
// minute, the large ones at 56/44% (four minutes in five hold no flush of
// the small host). Once a span has been judged each host is within a point
// of its share. At an hour the first host stops serving (its flushes count
// no micros): the second host's share is on its way two minutes after the
// first host's first such flush, and at its new split (35/55) once a whole
// span follows that flush.
func TestShareIsJudgedOnWholeMinutes(t *testing.T) {
	weights := []float64{0.45, 0.35, 0.20}
	every := []int64{60, 60, 300} // seconds between flushes
	phase := []int64{17, 17, 43}  // the second of the minute
	const perSecond = 1_000       // micros asked a second, fleet-wide
	r := rand.New(rand.NewPCG(35, 1))
	hosts := make([]*campaign, len(weights))
	for i := range hosts {
		hosts[i] = &campaign{}
	}
	ring := &shareRing{slots: map[int64]int64{}, minutes: map[int64]int64{}}
	pending := make([]float64, len(weights))
	const stop = 61*60 + 17 // host 0's demand ends with its flush at 61:17
	want := func(h int, at int64) float64 {
		if at < stop {
			return weights[h]
		}
		return weights[h] / (1 - weights[0])
	}
	for second := int64(1); second <= 2*3600; second++ {
		for h, w := range weights {
			if h != 0 || second < stop {
				pending[h] += w * perSecond
			}
		}
		for _, h := range r.Perm(len(weights)) {
			if second%60 != phase[h] || (second/60)%(every[h]/60) != 0 {
				continue
			}
			asked := int64(pending[h])
			pending[h] -= float64(asked)
			ring.flush(hosts[h], second, asked)
		}
		check := func(h int, what string) {
			if got := hosts[h].share; math.Abs(got-want(h, second)) > 0.01 {
				t.Errorf("%d:%02d, %s: host %d's share %.3f, want %.3f", second/60, second%60, what, h, got, want(h, second))
			}
		}
		switch second {
		case 5*60 + 59:
			for h := range hosts {
				if hosts[h].shareJudged {
					t.Errorf("5:59: host %d judged a span shorter than %d minutes", h, shareSpanMinutes)
				}
			}
		case 7 * 60, 30 * 60: // each large host has judged a span; the small host, at 43 past
			check(0, "a span judged")
			check(1, "a span judged")
		case 20*60 + 59, 3600 + 30:
			for h := range hosts {
				if !hosts[h].shareJudged {
					t.Fatalf("%d s: host %d has judged no span", second, h)
				}
				check(h, "spans judged")
			}
		case stop + 2*60 + 13:
			if got := hosts[1].share; got < weights[1]+0.02 {
				t.Errorf("two minutes after the first host's first flush without micros: host 1's share %.3f, want on its way from %.2f", got, weights[1])
			}
		case stop + (shareSpanMinutes+1)*60 + 13:
			check(1, "a whole span after the first host's first flush without micros")
		case 2 * 3600:
			check(1, "an hour after")
			check(2, "an hour after")
		}
	}
}

// Issue 35 (the tiny scenario, seed 10): a host with 45% of a 60-bid
// campaign's SPENDs first judged a whole slot in which the fleet asked
// 7,214 micros (three or four SPENDs of a 2,000 mean) and it asked 368.
// Taken whole, that slot set its share to 0.05, and its spend meter held it
// there for thirteen hours, refusing its fetches while the campaign fell
// four bids behind its curve. A span of a few SPENDs moves the share
// n/(n+8) of the way (pace.ShareWeight).
func TestSparseSpanMovesTheShareLittle(t *testing.T) {
	c := &campaign{fleetUnit: 4_000, meanSpend: 2_000, meanSpends: meanSpendWindow}
	const m0 = 29_000_000                                                                 // a Unix minute
	c.updateShare("d", 2, lease.Recent{Minute: m0}, 3_415, lease.FleetAsked{Slot: 3_415}) // the stand-in: all of slot 2 so far
	c.updateShare("d", 3, c.shareSpan("d", m0+5), 368, lease.FleetAsked{Slot: 4_367, Before: 3_415})
	standIn := c.share
	rc := c.shareSpan("d", m0+10)
	if rc.From != m0+1 || rc.To != m0+5 {
		t.Fatalf("third flush asks for minutes %d..%d, want %d..%d", rc.From, rc.To, m0+1, m0+5)
	}
	c.updateShare("d", 4, rc, 1_015, lease.FleetAsked{Slot: 1_015, Before: 7_214, Span: 7_214}) // 368 of 7,214
	if !c.shareJudged {
		t.Fatal("the span was not judged")
	}
	n := 7_214 / c.meanBid()
	if want := standIn + n/(n+8)*(368.0/7_214-standIn); math.Abs(c.share-want) > 1e-9 || c.share < 0.3 {
		t.Errorf("after a span of %.1f SPENDs, 5%% of them this host's: share %.3f (stand-in %.3f); want %.3f, the stand-in moved %.2f of the way",
			n, c.share, standIn, want, n/(n+8))
	}
	// A span the ring no longer holds (16 minutes) is not asked for; a new
	// day starts the spans again.
	if rc := c.shareSpan("d", m0+10+lease.RecentMinutes); rc.From != 0 {
		t.Errorf("a span ending %d minutes before the flush asked for: %+v", lease.RecentMinutes, rc)
	}
	if rc := c.shareSpan("e", m0+11); rc.From != 0 {
		t.Errorf("the next day's first flush asks for the last day's span: %+v", rc)
	}
}
