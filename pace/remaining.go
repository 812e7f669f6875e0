package pace

// What the day has left now, as a host can know it: each shard says what it
// has not leased or spent when the host calls it, and a host calls one
// shard at a time, some a lease window ago or more. The rule, checked over
// random readings and inputs (remaining_test.go):
//
//  22. Stale: a shard that said it had r left when the curve stood at c_s
//      has since released b·(c − c_s)/PPB of it along its curve (b its part
//      of the day's budget, c the curve now; at most r), which the fleet,
//      keeping up with its curve, has leased meanwhile: Input.Stale sums
//      that over the shards. A host judges how far behind its curve the
//      campaign is (1) by the answers less what is stale, R − Stale, so an
//      answer read longer ago does not make the day more behind: the
//      answers of a budget-bound campaign's shards, as said, put it a
//      window or two of pace behind while every shard was on its curve, and
//      its hosts targeted up to three times their share of the pace, asking
//      at every chance for leases the shards, bound by the curve, could not
//      grant. But a day behind by more than CatchingWindows of pace as
//      said (Catching) is not being kept up with, whatever is stale: it is
//      judged by the answers as said, so a fleet that lost a host catches
//      up as fast as its shards show.

// ShardReading is a shard's last answer to this host.
type ShardReading struct {
	Left    int64 // what the shard said it had not leased or spent
	Budget  int64 // the shard's part of the day's budget
	CurveAt int64 // the curve's position (0..PPB) when it said so
}

// Stale is what the shards have released along their curves since their
// readings, at the curve's position curveNow (22): each reading's part, at
// most what it said it had.
func Stale(readings []ShardReading, curveNow int64) int64 {
	var sum int64
	for _, r := range readings {
		if moved := clampPPB(curveNow) - clampPPB(r.CurveAt); moved > 0 && r.Left > 0 {
			sum += min(mulPPB(max(r.Budget, 0), moved), r.Left)
		}
	}
	return sum
}
