package pace

import (
	"math"
	"time"
)

// The start sweep: how many shards a host asks in one round while it
// starts its supply at its day's start. Condition 19 of the contract
// (sweep_test.go checks it over random rounds, and over a fleet of up to
// a thousand hosts meeting a day's opening).
//
//  19. A host starting its supply (Decision.Starting) within a lease window
//      of its day's start (Sweeps) may ask more than one shard in a round:
//      its regular ask, then the next shard it has not asked for a
//      MinGrantGap, oldest asked first, and so on, while (SweepsOn)
//        - its ask is not filled,
//        - it has asked fewer than SweepLimit shards this round:
//          ceil(shards × s × (1 − t/W)) + 1, s its share of the fleet's
//          demand (1 while not known), t the time since the day's start:
//          the limit tapers to one shard a round at the window's end, so
//          that the shards bank the fleet's slower cadence after the sweep
//          (one shard a gap a host) gradually, not in one dip, and
//        - the round has asked one shard only (its regular ask), or the
//          shard it asked last granted it at least half a MinGrantGap of
//          the shard's release at the fleet's rate (ShardGathers; a
//          renewal's own micros given back and granted again do not
//          count). A shard that granted less is called by the fleet more
//          than twice a gap; asking the next one would add a ledger call,
//          not budget.
//      The round's regular ask carries the host's demand, and the ledger's
//      fair split grants it its share of what the shard holds, or of what
//      the shard released since its last grant there; every later ask of
//      the round carries none, and takes what the shard holds, up to the
//      ask (SweepSplits). A round asks in all for a MinGrantGap of the
//      host's target (a tick of it, for a host whose refill loop ticks less
//      often), less the tokens it holds (SweepAsk): what a round gathers is
//      credited at once (the start credit, condition 6), and what the host
//      cannot spend before its next round is another host's to gather.
//      After a shard with nothing whose curve has budget still to release
//      (Locked), the host asks again a MinGrantGap later (HoldAfter's
//      Starting), not an eighth of a window.
//
// At a day's opening each shard holds only what its curve has released
// since the fleet last called it, so a host asking one shard a gap gathers
// a few per cent of the pace until the fleet's calls cover the shards. The
// fair split keeps a part of each shard for each live holder, so under it
// a host gathers its part of a shard only when it calls that shard, and a
// fleet of n hosts, each asking one shard a gap of S, gathers the shards'
// release only as its hosts' rotations reach every shard: the shards bank
// half a rotation of the pace (sixteen hosts on 8 shards, a round every 2
// s: 56% of the pace over 2-12 s). So the sweep's asks past the first are
// not split: each is bounded by what its round still needs, which follows
// the host's own demand. The regular ask keeps the split, so that each host's record
// on the shards it rotates through is in place when the sweep ends.
// The third clause bounds the fleet, whatever its size and whether its
// hosts know their shares: a round's second ask and those after it go on
// only after an answer that granted half a gap of the shard's release. So
// a fleet of n hosts, each starting a round a gap, makes at most 2n calls
// a gap plus two a shard for each gap of release the fleet gathers: at a
// day's opening, when the shards hold only what the curve has released,
// 2n + 2 × shards, where n hosts asking one shard a gap each would make n,
// and a single host asks every shard each gap.

// SweepRound is what a host knows, within one round of its sweep, when it
// may ask one more shard.
type SweepRound struct {
	Shards int     // the day's shards
	Share  float64 // its share of the fleet's demand (0: not known)
	Asked  int     // shards asked this round so far, the regular ask included
	// Taper is what is left of the day's first lease window, as a share of
	// it (1 at the day's start, 0 at the window's end).
	Taper float64
	Left  int64 // what is left of the round's ask
	// Gathered is what the shard asked last granted the host, less what a
	// renewal in the same call gave back to it.
	Gathered int64
	// Gathers is what one shard releases over half a MinGrantGap at the
	// fleet's rate (ShardGathers).
	Gathers int64
}

// Sweeps reports whether a host sweeps the shards (condition 19):
// starting its supply (Decision.Starting) within a lease window of its
// day's start.
func Sweeps(starting bool, sinceDayStart, window time.Duration) bool {
	return starting && sinceDayStart >= 0 && sinceDayStart < window
}

// SweepLimit is the most shards a sweeping host asks in one round
// (condition 19): ceil(shards × share × taper) + 1, share 1 while not
// known (0), both clamped to [0, 1]; at least 1.
func SweepLimit(shards int, share, taper float64) int {
	if share <= 0 || share > 1 || math.IsNaN(share) {
		share = 1
	}
	if !(taper > 0) { // NaN too
		taper = 0
	}
	return int(math.Ceil(float64(max(shards, 0))*share*min(taper, 1))) + 1
}

// sweepGathered is how long a shard must have gathered its release for a
// sweep to go on past it (condition 19).
const sweepGathered = MinGrantGap / 2

// ShardGathers is what one of shards releases over half a MinGrantGap
// when the fleet may take fleetWindow over window (Decision.FleetWindow):
// the least a shard must have granted for a sweep to go on past it. At
// least 1: a grant of nothing never lets a sweep go on.
func ShardGathers(fleetWindow int64, window time.Duration, shards int) int64 {
	if window <= 0 || shards <= 0 {
		return math.MaxInt64
	}
	g := float64(max(fleetWindow, 0)) * sweepGathered.Seconds() / window.Seconds() / float64(shards)
	return max(int64(min(g, math.MaxInt64/2)), 1)
}

// SweepAsk is what one round of a sweep asks for in all (condition 19):
// what the host's target (d.HostRate) needs until its next round, a
// MinGrantGap of it or, for a host whose refill loop ticks less often, a
// tick (the host's rounds come at its ticks), less the tokens it holds,
// and never more than its regular ask (d.Ask); 0 when its tokens cover
// that.
func SweepAsk(d Decision, tokens int64, tick time.Duration) int64 {
	need := int64(min(d.HostRate*max(MinGrantGap, tick).Seconds(), math.MaxInt64/2))
	return max(min(need-max(tokens, 0), d.Ask), 0)
}

// SweepsOn reports whether a sweeping host asks one more shard this round
// (condition 19).
func SweepsOn(r SweepRound) bool {
	return r.Left > 0 && r.Asked < SweepLimit(r.Shards, r.Share, r.Taper) && (r.Asked <= 1 || r.Gathered >= max(r.Gathers, 1))
}

// SweepSplits reports whether the ask-th ask of a sweep's round (1: its
// regular ask) carries the host's demand for the ledger's fair split
// (condition 19): the regular ask only.
func SweepSplits(ask int) bool {
	return ask <= 1
}
